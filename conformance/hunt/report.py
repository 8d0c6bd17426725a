"""The hunt's report: canonical JSON (the same hunt gives the same bytes), a coverage table, and
the findings grouped by failure signature.

A report is assembled from per-workload sections alone (:func:`assemble`), so the report of a
shard and the merge of all shards' reports (:func:`merge`) go through the same code as a
one-machine hunt, and give the same bytes. Nothing in it depends on the wall clock, the number
of workers or ``PYTHONHASHSEED``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cassettes import inputs

FORMAT = "loopkit-hunt/1"
KINDS = ("notification", "log", "waterfall", "flush", "world")
"""Window kinds, in the coverage table's order."""


class ReportError(ValueError):
    """A hunt report cannot be read or merged (one-line message naming the file)."""


def _coverage(sections: Iterable[dict[str, Any]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for section in sections:
        for kind, row in section["coverage"].items():
            acc = out.setdefault(kind, {"enumerated": 0, "run": 0, "distinct": 0})
            for k in acc:
                acc[k] += int(row[k])
    return {k: out[k] for k in (*KINDS, *sorted(set(out) - set(KINDS))) if k in out}


def _grouped(sections: list[dict[str, Any]], key: str, limit: int) -> list[dict[str, Any]]:
    groups: dict[str, dict[str, Any]] = {}
    for section in sections:
        for item in section[key]:
            sig = item["signature"]
            g = groups.get(sig)
            if g is None:
                g = groups[sig] = {"signature": sig, "windows": 0, "workloads": [], "first": item["window"],
                                   "examples": []}
                for k in ("checks", "rules", "message", "reference", "impl"):
                    if k in item:
                        g[k] = item[k]
            g["windows"] += 1
            if section["name"] not in g["workloads"]:
                g["workloads"].append(section["name"])
            if len(g["examples"]) < limit:
                example = {"window": item["window"]}
                if item.get("cassette"):
                    example["cassette"] = item["cassette"]
                if item.get("unreplayable"):
                    example["unreplayable"] = item["unreplayable"]
                g["examples"].append(example)
    return sorted(groups.values(), key=lambda g: (-g["windows"], g["signature"]))


def assemble(*, impl: str, config: dict[str, Any], sections: list[dict[str, Any]], shard: str | None,
             planned: list[str], stopped: str | None = None) -> dict[str, Any]:
    """The report of the workload ``sections`` (in plan order) of a hunt over ``planned``;
    ``stopped`` says why it ended early (``"interrupted"``, ``"first finding"``), if it did."""
    sections = sorted(sections, key=lambda s: s["order"])
    findings = _grouped(sections, "findings", max(1, int(config.get("cassettes", 1))))
    differences = _grouped(sections, "differences", 3)
    totals = {
        "workloads": len(sections),
        "windows": sum(s["windows"] for s in sections),
        "run": sum(s["run"] for s in sections),
        "distinct": sum(s["distinct"] for s in sections),
        "explored": sum(s["explored"] for s in sections),
        "schedules": sum(s["schedules"] for s in sections),
        "twins": sum(s.get("twins", 0) for s in sections),
        "failing_windows": sum(len(s["findings"]) for s in sections),
        "findings": len(findings),
        "differences": len(differences),
    }
    return {
        "format": FORMAT,
        "impl": impl,
        "config": config,
        "shard": shard,
        "planned": planned,
        "stopped": stopped,
        "complete": stopped is None and {s["name"] for s in sections} == set(planned),
        "totals": totals,
        "coverage": _coverage(sections),
        "findings": findings,
        "differences": differences,
        "workloads": sections,
    }


def dumps(report: dict[str, Any]) -> str:
    """Canonical JSON text (sorted keys, two-space indent, a final newline)."""
    return json.dumps(report, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def load(path: str | Path) -> dict[str, Any]:
    """A hunt report from a file (raises :class:`ReportError`): JSON in the shape
    :func:`assemble` writes, checked field by field, since ``hunt merge`` reads reports that
    crossed machines and CI artefacts."""
    p = Path(path)
    try:
        data = json.loads(inputs.read_bytes(p).decode("utf-8"), parse_constant=_no_constant)
    except OSError as exc:
        raise ReportError(f"{p}: cannot read ({exc})") from None
    except UnicodeDecodeError:
        raise ReportError(f"{p}: not a hunt report (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"{p}:{exc.lineno}: not JSON ({exc.msg})") from None
    except (RecursionError, ValueError) as exc:  # nesting past the parser's depth; an int of 5,000 digits
        raise ReportError(f"{p}: not a hunt report ({_first_line(exc) or 'nested too deeply'})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ReportError(f"{p}: not a hunt report (expected format {FORMAT!r})")
    for key in ("impl", "config", "workloads", "planned"):
        if key not in data:
            raise ReportError(f"{p}: a hunt report without {key!r}")
    problem = _shape_problem(data)
    if problem:
        raise ReportError(f"{p}: not a hunt report ({problem})")
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


_COUNTS = ("windows", "run", "distinct", "explored", "schedules")


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _shape_problem(data: dict[str, Any]) -> str | None:
    """What in ``data`` is not as :func:`assemble` writes it (the fields merging reads), or None."""
    if not isinstance(data["impl"], str):
        return "impl is not a string"
    if not isinstance(data["config"], dict):
        return "config is not an object"
    if not isinstance(data["planned"], list) or not all(isinstance(n, str) for n in data["planned"]):
        return "planned is not a list of workload names"
    if data.get("stopped") is not None and not isinstance(data["stopped"], str):
        return "stopped is not a string"
    shard = data.get("shard")
    if shard is not None and not (isinstance(shard, str) and _is_shard(shard)):
        return f"shard is {shard!r}, not I/N"
    if not isinstance(data["workloads"], list):
        return "workloads is not a list"
    for k, s in enumerate(data["workloads"]):
        where = f"workloads[{k}]"
        if not isinstance(s, dict) or not isinstance(s.get("name"), str):
            return f"{where} has no name"
        if s["name"] not in data["planned"]:
            return f"{where} is workload {s['name']!r}, which the hunt did not plan"
        if type(s.get("order")) is not int:
            return f"{where}.order is not an integer"
        for key in (*_COUNTS, "twins"):
            if (key in s or key != "twins") and not _count(s.get(key)):
                return f"{where}.{key} is not a count"
        coverage = s.get("coverage")
        if not isinstance(coverage, dict) or not all(
                isinstance(row, dict) and all(_count(row.get(c)) for c in ("enumerated", "run", "distinct"))
                for row in coverage.values()):
            return f"{where}.coverage is not a table of counts"
        for key in ("findings", "differences"):
            items = s.get(key, [])
            if not isinstance(items, list) or not all(_finding(i) for i in items):
                return f"{where}.{key} is not a list of findings"
    return None


def _finding(item: Any) -> bool:
    """Whether ``item`` has a finding's fields of their types (those a merged report shows)."""
    if not isinstance(item, dict) or not all(isinstance(item.get(k), str) for k in ("signature", "window")):
        return False
    lists = all(isinstance(item.get(k, []), list) and all(isinstance(x, str) for x in item.get(k, []))
                for k in ("checks", "rules"))
    return lists and (type(item.get("index", 0)) is int) and isinstance(item.get("message", ""), str)


def _is_shard(spec: str) -> bool:
    from .shards import ShardError, parse

    try:
        parse(spec)
    except ShardError:
        return False
    return True


def merge(reports: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """One report from shard reports ``[(path, report), ...]`` of one hunt: what one machine
    running the whole hunt reports (``complete`` once every planned workload is there)."""
    if not reports:
        raise ReportError("nothing to merge")
    path0, first = reports[0]
    sections: dict[str, dict[str, Any]] = {}
    stopped: str | None = None
    for path, r in reports:
        for key in ("impl", "config", "planned"):
            if r[key] != first[key]:
                raise ReportError(f"{path}: another hunt than {path0} ({key} differs)")
        for s in r["workloads"]:
            if s["name"] in sections and sections[s["name"]] != s:
                raise ReportError(f"{path}: workload {s['name']!r} also in another report, with other results")
            sections[s["name"]] = s
        stopped = stopped or r.get("stopped")
    return assemble(impl=first["impl"], config=first["config"], sections=list(sections.values()), shard=None,
                    planned=first["planned"], stopped=stopped)


__all__ = ["FORMAT", "KINDS", "ReportError", "assemble", "dumps", "load", "merge"]
