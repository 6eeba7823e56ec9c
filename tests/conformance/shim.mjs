// Loopback shim: forwards every request to TARGET, adding Authorization: Bearer TOKEN.
import http from 'node:http';
const target = new URL(process.env.TARGET);
const token = process.env.TOKEN;
const server = http.createServer((req, res) => {
  // The Host stays the client's: the gateway's DNS-rebinding check must see what it sent.
  const headers = { ...req.headers, authorization: `Bearer ${token}` };
  const upstream = http.request({ hostname: target.hostname, port: target.port, path: target.pathname + (req.url.includes('?') ? req.url.slice(req.url.indexOf('?')) : ''), method: req.method, headers }, (up) => {
    res.writeHead(up.statusCode, up.headers);
    up.pipe(res);
  });
  upstream.on('error', (e) => { res.writeHead(502); res.end(String(e)); });
  req.pipe(upstream);
});
server.listen(Number(process.env.PORT || 0), '127.0.0.1', () => console.log(`listening on http://127.0.0.1:${server.address().port}`));
