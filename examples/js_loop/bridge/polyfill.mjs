// Promise.withResolvers (ES2024) is missing from Node 20, which the bridge supports (>= 20).
// Code written for current Node uses it; this is the standard polyfill, installed only where
// the runtime lacks it (the bridge imports this module before the implementation's code).
if (typeof Promise.withResolvers !== 'function') {
  Object.defineProperty(Promise, 'withResolvers', {
    configurable: true,
    writable: true,
    value: function withResolvers() {
      let resolve;
      let reject;
      const promise = new this((res, rej) => {
        resolve = res;
        reject = rej;
      });
      return { promise, resolve, reject };
    },
  });
}
