// Preloaded into the everything-server (`node --import ./loopback.mjs`): a listen() given
// only a port binds 127.0.0.1 instead of every interface, without changing the vendored code.
import net from 'node:net';

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const [port, ...rest] = args;
  if (typeof port === 'number' || (typeof port === 'string' && /^\d+$/.test(port))) {
    const callbacks = rest.filter((arg) => typeof arg === 'function');
    return listen.call(this, Number(port), '127.0.0.1', ...callbacks);
  }
  return listen.apply(this, args);
};
