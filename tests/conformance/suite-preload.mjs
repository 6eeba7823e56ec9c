// Preloaded into the conformance suite's CLI by client.sh (`node --import ./suite-preload.mjs`).
// Two changes to how the suite's scenario servers listen and stop; none to what they check
// (the suite reads a scenario's checks before it stops its servers).
import http from 'node:http';
import net from 'node:net';

// A listen() without a host binds 127.0.0.1 instead of every interface. loopback.mjs (for
// the everything-server) passes a host to listen(), which makes the bind wait for a DNS
// lookup; the scenario servers read server.address().port right after listen(0), so here
// the bind must stay synchronous. Node keeps the internal _listen2 under that name so that
// code can wrap it; it is given the address null when none was asked for.
const listen2 = net.Server.prototype._listen2;
net.Server.prototype._listen2 = function (address, port, addressType, ...rest) {
  if (!address) return listen2.call(this, '127.0.0.1', port, 4, ...rest);
  return listen2.call(this, address, port, addressType, ...rest);
};

// Stopping a server drops the connections still open to it. The suite waits for its
// servers to close, which its SDK clients allow by exiting; the pool is a service that
// outlives the scenario and keeps idle connections to a server for a while (one it opened
// and never used is not even "idle" to node), so without this some scenarios never end.
// The suite's own OAuth servers already stop this way.
const close = http.Server.prototype.close;
http.Server.prototype.close = function (...args) {
  const result = close.apply(this, args);
  this.closeAllConnections();
  return result;
};
