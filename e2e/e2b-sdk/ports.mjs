// Port traffic with the official e2b SDK (2.51.0), run by e2e/ports_test.go:
// trafficAccessToken and domain from create and connect, getHost(port), and a
// server in the sandbox (busybox httpd) reached by E2B's header routing and
// by the {port}-{id}.{domain} host form. SPACE_ADDR is the server's
// host:port, which the host form is sent to (*.localhost need not resolve
// here). Every check throws on failure; the last line says ok.
import http from 'node:http';
import { Sandbox } from 'e2b-new';

const addr = process.env.SPACE_ADDR;
const domain = process.env.EXPECT_DOMAIN;
function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
  console.log('ok:', what);
}

// get sends GET path to the server with headers (Host among them when set)
// and returns {status, body}.
function get(path, headers) {
  const [host, port] = [addr.slice(0, addr.lastIndexOf(':')), Number(addr.slice(addr.lastIndexOf(':') + 1))];
  return new Promise((resolve, reject) => {
    const req = http.request({ host, port, path, method: 'GET', headers, timeout: 60_000 }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString() }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

const opts = { timeoutMs: 600_000, requestTimeoutMs: 600_000 };
const sbx = await Sandbox.create('base', { ...opts, metadata: { suite: 'ports' } });
console.log('created', sbx.sandboxId);
try {
  check(typeof sbx.trafficAccessToken === 'string' && sbx.trafficAccessToken.length > 20, 'create returns a trafficAccessToken');
  check(sbx.sandboxDomain === domain, `create returns domain ${sbx.sandboxDomain}`);
  const host = sbx.getHost(8080);
  check(host === `8080-${sbx.sandboxId}.${domain}`, `getHost(8080) = ${host}`);

  const hdr = (extra) => ({ 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8080', ...extra });
  let r = await get('/', hdr({ 'E2B-Traffic-Access-Token': sbx.trafficAccessToken }));
  check(r.status === 502 && r.body.includes('"code":502'), `nothing listens yet: ${r.status} ${r.body.trim()}`);

  await sbx.files.write('/home/user/www/index.html', 'hello from port 8080\n');
  await sbx.commands.run('busybox httpd -f -p 8080 -h /home/user/www', { ...opts, background: true });
  const deadline = Date.now() + 60_000;
  for (;;) {
    r = await get('/', hdr({ 'E2B-Traffic-Access-Token': sbx.trafficAccessToken }));
    if (r.status === 200 || Date.now() > deadline) break;
    await new Promise((ok) => setTimeout(ok, 250));
  }
  check(r.status === 200 && r.body === 'hello from port 8080\n', `header routing with the traffic token: ${r.status} ${JSON.stringify(r.body)}`);
  r = await get('/index.html?x=1', hdr({ 'X-Access-Token': sbx.envdAccessToken }));
  check(r.status === 200 && r.body === 'hello from port 8080\n', `header routing with the envd token: ${r.status}`);
  r = await get('/', hdr({}));
  check(r.status === 401, `header routing without a token: ${r.status}`);
  r = await get('/', hdr({ 'E2B-Traffic-Access-Token': 'wrong' }));
  check(r.status === 401, `header routing with a wrong token: ${r.status}`);
  r = await get('/', { ...hdr({ 'E2B-Traffic-Access-Token': sbx.trafficAccessToken }), 'E2b-Sandbox-Port': '0' });
  check(r.status === 400, `port 0: ${r.status}`);

  // The host form getHost builds, with the traffic token.
  r = await get('/', { Host: host, 'E2B-Traffic-Access-Token': sbx.trafficAccessToken });
  check(r.status === 200 && r.body === 'hello from port 8080\n', `host form ${host} with the traffic token: ${r.status} ${r.body.trim()}`);
  r = await get('/', { Host: host });
  check(r.status === 401, `host form without a token: ${r.status}`);

  // connect hands out the same kind of access again.
  const again = await Sandbox.connect(sbx.sandboxId, opts);
  check(again.trafficAccessToken && again.sandboxDomain === domain, 'connect returns a trafficAccessToken and the domain');
  r = await get('/', hdr({ 'E2B-Traffic-Access-Token': again.trafficAccessToken }));
  check(r.status === 200, `connect's traffic token opens the port: ${r.status}`);
} finally {
  await sbx.kill();
}
const r = await get('/', { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8080', 'E2B-Traffic-Access-Token': sbx.trafficAccessToken });
check(r.status === 404, `a killed sandbox's port: ${r.status}`);
console.log('ok: all checks passed');
