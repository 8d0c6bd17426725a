// In-place edits the driver's code made to a value this child handed it (docs/wire-protocol.md
// §9.1): a plugin editing the request it is given, a model adapter converting a request's
// messages, a tool consuming its arguments. In one process they edit the loop's own objects;
// here the driver edits a decoded copy and sends the edit, and the child makes the same change
// to its objects in place, so a loop that shares them with its log (or between calls) shows it.

/**
 * Apply `edit` (`{value, moves: [[newPath, oldPath], ...]}`) to `original`, a value of shape
 * `shape` the child handed over: each container the edit kept (a move) stays the loop's own
 * object, its content made what the driver's is; new containers are fresh objects.
 * @returns the value as edited (`original` itself when the edit kept the root)
 */
export function applyEdit(codec, shape, original, edit) {
  const fresh = codec.decode(shape, edit.value);
  const swap = new Map();
  for (const [newPath, oldPath] of edit.moves ?? []) {
    const target = codec.locate(shape, original, oldPath);
    const source = codec.locate(shape, fresh, newPath);
    if (isContainer(target) && isContainer(source) && Array.isArray(target) === Array.isArray(source)) swap.set(source, target);
  }
  const containers = [];
  collect(fresh, containers);
  for (const container of containers) {
    for (const key of Object.keys(container)) {
      const kept = swap.get(container[key]);
      if (kept !== undefined) container[key] = kept;
    }
  }
  for (const [source, target] of swap) {
    if (Array.isArray(target)) {
      target.splice(0, target.length, ...source);
    } else {
      for (const key of Object.keys(target)) if (!(key in source)) delete target[key];
      Object.assign(target, source);
    }
  }
  return swap.get(fresh) ?? fresh;
}

function isContainer(value) {
  return value !== null && typeof value === 'object' && (Array.isArray(value) || Object.getPrototypeOf(value) === Object.prototype);
}

function collect(value, out) {
  if (!isContainer(value)) return;
  out.push(value);
  for (const item of Object.values(value)) collect(item, out);
}
