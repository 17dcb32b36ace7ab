// Drives SPACE's E2B-compatible API with the official e2b SDK, at the
// version E2B_SDK names (e2b-new = 2.51.0, e2b-old = 2.50.0), run by
// e2e/e2b_test.go. Every check throws on failure; the last line says ok.
const which = process.env.E2B_SDK;
const { Sandbox, CommandExitError, NotFoundError, AuthenticationError, FileNotFoundError } =
  await import(which === 'old' ? 'e2b-old' : 'e2b-new');

const log = (...a) => console.log(`[${which}]`, ...a);
function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
  log('ok:', what);
}
async function rejects(p, cls, what) {
  try {
    await p;
  } catch (e) {
    check(e instanceof cls, `${what} (${e.constructor.name}: ${e.message})`);
    return e;
  }
  throw new Error(`check failed: ${what}: did not throw`);
}

const tag = `run-${which}-${Date.now()}`;
const opts = { timeoutMs: 600_000, requestTimeoutMs: 600_000 };
const sbx = await Sandbox.create('base', {
  ...opts, metadata: { suite: tag, n: '1' }, envs: { GREETING: 'hello-env' }, allowInternetAccess: false,
});
log('created', sbx.sandboxId);

// commands.run: stdout, stderr, exit codes, envs, cwd, streaming, big output
let r = await sbx.commands.run('echo out; echo err 1>&2', opts);
check(r.exitCode === 0 && r.stdout === 'out\n' && r.stderr === 'err\n', `run stdout/stderr ${JSON.stringify(r)}`);
r = await sbx.commands.run('echo $GREETING $X', { ...opts, envs: { X: 'cmd-env' } });
check(r.stdout === 'hello-env cmd-env\n', `sandbox and command envs: ${JSON.stringify(r.stdout)}`);
r = await sbx.commands.run('pwd; id -un', { ...opts, cwd: '/tmp' });
check(r.stdout === '/tmp\nuser\n', `cwd and default user: ${JSON.stringify(r.stdout)}`);
r = await sbx.commands.run('id -un', { ...opts, user: 'root' });
check(r.stdout === 'root\n', `user root: ${JSON.stringify(r.stdout)}`);
const e = await rejects(sbx.commands.run('echo nope 1>&2; exit 3', opts), CommandExitError, 'non-zero exit is CommandExitError');
check(e.exitCode === 3 && e.stderr === 'nope\n', `exit code 3 and stderr: ${e.exitCode} ${JSON.stringify(e.stderr)}`);
const chunks = [];
r = await sbx.commands.run('for i in 1 2 3; do echo line$i; sleep 0.2; done', { ...opts, onStdout: (d) => chunks.push(d) });
check(chunks.join('') === 'line1\nline2\nline3\n' && chunks.length >= 2, `onStdout streamed ${chunks.length} chunks`);
// longer than the server's 30s body read bound: the stream must live on
r = await sbx.commands.run('sleep 35; echo slept', opts);
check(r.stdout === 'slept\n', 'a command longer than 30s');
r = await sbx.commands.run('head -c 3000000 /dev/zero | tr "\\0" a', opts);
check(r.stdout.length === 3000000, `large output: ${r.stdout.length} bytes`);

// background commands: list, sendStdin, connect, kill
const bg = await sbx.commands.run('cat', { ...opts, background: true, stdin: true });
check(bg.pid > 0, `background pid ${bg.pid}`);
let procs = await sbx.commands.list();
check(procs.some((p) => p.pid === bg.pid && p.cmd === '/bin/bash'), `commands.list has ${bg.pid}`);
await sbx.commands.sendStdin(bg.pid, 'typed\n');
const attached = await sbx.commands.connect(bg.pid, opts);
await sbx.commands.closeStdin(bg.pid);
const done = await attached.wait();
check(done.stdout.includes('typed\n'), `sendStdin reached cat and connect saw it: ${JSON.stringify(done.stdout)}`);
const sleeper = await sbx.commands.run('sleep 600', { ...opts, background: true });
check(await sbx.commands.kill(sleeper.pid) === true, 'kill a background command');
await rejects(sleeper.wait(), CommandExitError, 'killed command ends with CommandExitError');
procs = await sbx.commands.list();
check(!procs.some((p) => p.pid === sleeper.pid), 'killed command is gone from the list');

// files
await sbx.files.write('/home/user/hello.txt', 'hi there');
check(await sbx.files.read('/home/user/hello.txt') === 'hi there', 'write/read text');
const bin = new Uint8Array([0, 1, 2, 250, 255]);
await sbx.files.write('data.bin', bin.buffer);
const back = await sbx.files.read('data.bin', { format: 'bytes' });
check(back.length === 5 && back[3] === 250, 'write/read bytes, relative to the home');
r = await sbx.commands.run('cat hello.txt; echo; stat -c %U hello.txt', opts);
check(r.stdout === 'hi there\nuser\n', `commands see the file, owned by user: ${JSON.stringify(r.stdout)}`);
check(await sbx.files.exists('/home/user/hello.txt') === true, 'exists true');
check(await sbx.files.exists('/home/user/missing') === false, 'exists false');
const info = await sbx.files.getInfo('/home/user/hello.txt');
check(info.type === 'file' && info.size === 8 && info.name === 'hello.txt', `getInfo ${JSON.stringify(info)}`);
check(await sbx.files.makeDir('/home/user/d/e') === true, 'makeDir new');
check(await sbx.files.makeDir('/home/user/d/e') === false, 'makeDir existing is false');
await sbx.files.rename('/home/user/hello.txt', '/home/user/d/moved.txt');
const ents = await sbx.files.list('/home/user/d');
check(ents.map((x) => x.name).sort().join(',') === 'e,moved.txt', `list ${ents.map((x) => x.name)}`);
await sbx.files.remove('/home/user/d');
check(await sbx.files.exists('/home/user/d') === false, 'remove');
await rejects(sbx.files.read('/home/user/nothing-here'), FileNotFoundError, 'reading a missing file');

// control plane
const got = await Sandbox.getInfo(sbx.sandboxId);
check(got.sandboxId === sbx.sandboxId && got.metadata.suite === tag && got.state === 'running', `getInfo ${JSON.stringify(got)}`);
await sbx.setTimeout(900_000);
const got2 = await Sandbox.getInfo(sbx.sandboxId);
check(got2.endAt.getTime() - Date.now() > 800_000, `setTimeout moved endAt to ${got2.endAt.toISOString()}`);
check(await sbx.isRunning() === true, 'isRunning');

const other = await Sandbox.create('base', { ...opts, metadata: { suite: tag, n: '2' } });
const paginator = Sandbox.list({ query: { metadata: { suite: tag } }, limit: 1 });
const seen = [];
while (paginator.hasNext) {
  const items = await paginator.nextItems();
  check(items.length <= 1, `page of ${items.length}`);
  seen.push(...items.map((x) => x.sandboxId));
}
check(seen.length === 2 && seen.includes(sbx.sandboxId) && seen.includes(other.sandboxId), `list by metadata, paged: ${seen}`);
const only = await Sandbox.list({ query: { metadata: { suite: tag, n: '2' } } }).nextItems();
check(only.length === 1 && only[0].sandboxId === other.sandboxId, 'list by two metadata keys');
check(await other.kill() === true, 'kill the second sandbox');

// pause then connect: files and a running process survive
await sbx.files.write('/home/user/keep.txt', 'kept');
const counter = await sbx.commands.run('i=0; while true; do i=$((i+1)); echo $i > /home/user/count; sleep 1; done', { ...opts, background: true });
await sbx.pause();
check(await sbx.isRunning() === false, 'paused sandbox is not running');
const listed = await Sandbox.list({ query: { metadata: { suite: tag }, state: ['paused'] } }).nextItems();
check(listed.length === 1 && listed[0].state === 'paused', 'list state paused');
const again = await Sandbox.connect(sbx.sandboxId, opts);
check(await again.isRunning() === true, 'connect resumed it');
check(await again.files.read('/home/user/keep.txt') === 'kept', 'file kept across pause');
procs = await again.commands.list();
check(procs.some((p) => p.pid === counter.pid), 'process kept across pause');
await again.commands.kill(counter.pid);

// keys
const key = process.env.E2B_API_KEY;
await rejects(Sandbox.getInfo(sbx.sandboxId, { apiKey: 'space_wrong' }), AuthenticationError, 'a wrong key');
await rejects(Sandbox.getInfo(sbx.sandboxId, { apiKey: process.env.OTHER_API_KEY }), NotFoundError, "another tenant's key");
check(await Sandbox.kill(sbx.sandboxId, { apiKey: process.env.OTHER_API_KEY }) === false, "another tenant cannot kill it");
check(key.length > 0, 'key set');

check(await again.kill() === true, 'kill true');
check(await Sandbox.kill(sbx.sandboxId) === false, 'kill again false');
check(await sbx.isRunning() === false, 'killed sandbox is not running');
console.log(`ok: all checks passed (${which})`);
