// Framing: one JSON object per line, UTF-8, on the two descriptors the driver named in
// LOOPKIT_WIRE_FDS ("IN,OUT"). Reads block (fs.readSync): the bridge answers the driver
// synchronously, even from inside a listener. Outgoing messages are buffered and written in one
// go before every blocking read, so the driver always sees them in order, in few writes.

import fs from 'node:fs';
import { StringDecoder } from 'node:string_decoder';

export class ChannelClosed extends Error {}

export class Channel {
  /** @param {number} inFd @param {number} outFd */
  constructor(inFd, outFd) {
    this.inFd = inFd;
    this.outFd = outFd;
    this.buffer = Buffer.alloc(1 << 16);
    this.decoder = new StringDecoder('utf8');
    this.pending = '';
    /** @type {string[]} */
    this.outbox = [];
  }

  /** The descriptors named by the driver (LOOPKIT_WIRE_FDS="IN,OUT"). */
  static fromEnvironment(env = process.env) {
    const fds = String(env.LOOPKIT_WIRE_FDS ?? '').split(',').map(Number);
    if (fds.length !== 2 || fds.some((fd) => !Number.isInteger(fd) || fd < 0)) {
      throw new Error('LOOPKIT_WIRE_FDS is not set: start this program with a loopkit driver (--impl "wire:COMMAND")');
    }
    return new Channel(fds[0], fds[1]);
  }

  /** Queue a message (written at the next flush). */
  send(message) {
    this.outbox.push(JSON.stringify(message));
  }

  /** Write every queued message. */
  flush() {
    if (this.outbox.length === 0) return;
    const data = Buffer.from(`${this.outbox.join('\n')}\n`, 'utf8');
    this.outbox = [];
    let offset = 0;
    while (offset < data.length) offset += fs.writeSync(this.outFd, data, offset, data.length - offset);
  }

  /** Flush, then block until the next message. Throws ChannelClosed at end of input. */
  read() {
    this.flush();
    for (;;) {
      const newline = this.pending.indexOf('\n');
      if (newline >= 0) {
        const line = this.pending.slice(0, newline);
        this.pending = this.pending.slice(newline + 1);
        if (line.trim() === '') continue;
        return JSON.parse(line);
      }
      let count;
      try {
        count = fs.readSync(this.inFd, this.buffer, 0, this.buffer.length, null);
      } catch (error) {
        if (error.code === 'EAGAIN') continue; // a non-blocking descriptor: try again
        if (error.code === 'EOF') count = 0;
        else throw error;
      }
      if (count === 0) throw new ChannelClosed('the driver closed the channel');
      this.pending += this.decoder.write(this.buffer.subarray(0, count));
    }
  }
}
