// The environment benchmark's world (bench/environment.mjs): a package registry stand-in in a
// network namespace of its own, serving npm tarballs and a PyPI simple index that this bench
// builds, and fixture repositories (a Node one with a lockfile, a Python one with a venv) whose
// tests need those packages. Needs root, iproute2 and unshare, as test/torture/hostile-network.
import { execFileSync, spawn, spawnSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

export const REGISTRY = 'registry.bench.test'
// A /30 of 10.214.0.0/16 from this process's id: two runs at once on one machine do not meet.
const third = (process.pid >> 6) & 255
const fourth = (process.pid & 63) * 4
export const HOST_END = `10.214.${third}.${fourth + 1}`
export const FAR_END = `10.214.${third}.${fourth + 2}`
const NS = `ctxa-envb-${process.pid}`
const VETH = `cxe${process.pid}`

export function canRun() {
  return process.getuid?.() === 0 && spawnSync('ip', ['-V']).status === 0 && spawnSync('unshare', ['--version']).status === 0
}

const ip = (...args) => {
  const r = spawnSync('ip', args, { encoding: 'utf8' })
  if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr.trim()}`)
}

/** Serves `dir` at FAR_END:80 inside a namespace of its own; `requests` lists what it was asked. */
export async function startRegistry(dir) {
  ip('netns', 'add', NS)
  ip('link', 'add', `${VETH}h`, 'type', 'veth', 'peer', 'name', `${VETH}n`)
  ip('link', 'set', `${VETH}n`, 'netns', NS)
  ip('addr', 'add', `${HOST_END}/30`, 'dev', `${VETH}h`)
  ip('link', 'set', `${VETH}h`, 'up')
  ip('netns', 'exec', NS, 'ip', 'addr', 'add', `${FAR_END}/30`, 'dev', `${VETH}n`)
  ip('netns', 'exec', NS, 'ip', 'link', 'set', `${VETH}n`, 'up')
  ip('netns', 'exec', NS, 'ip', 'link', 'set', 'lo', 'up')
  // npm asks /<name> for a packument (served from <name>/index.json), pip /simple/<name>/ (index.html).
  const code = String.raw`
const { createReadStream, statSync } = require('fs'), { join, normalize } = require('path')
const root = process.argv[2]
require('http').createServer((q, r) => {
  const path = normalize(decodeURIComponent(new URL(q.url, 'http://x').pathname)).replace(/^(\.\.[\/\\])+/, '')
  console.log(q.method + ' ' + path)
  for (const f of [join(root, path), join(root, path, 'index.json'), join(root, path, 'index.html')]) {
    try { if (statSync(f).isFile()) { r.writeHead(200, { 'content-type': f.endsWith('.json') ? 'application/json' : f.endsWith('.html') ? 'text/html' : 'application/octet-stream' }); return createReadStream(f).pipe(r) } } catch {}
  }
  r.writeHead(404); r.end('not here')
}).listen(80, process.argv[1], () => console.log('listening'))`
  const server = spawn('ip', ['netns', 'exec', NS, process.execPath, '-e', code, FAR_END, dir], { stdio: ['ignore', 'pipe', 'inherit'] })
  const requests = []
  await new Promise((resolve, reject) => {
    let out = ''
    server.stdout.on('data', (d) => {
      out += d
      const lines = out.split('\n')
      out = lines.pop() ?? ''
      for (const line of lines) line === 'listening' ? resolve() : requests.push(line)
    })
    server.once('exit', (c) => reject(new Error(`the registry stand-in exited (${c})`)))
  })
  return {
    requests,
    stop() {
      server.kill('SIGKILL')
      spawnSync('ip', ['netns', 'del', NS])
      spawnSync('ip', ['link', 'del', `${VETH}h`])
    },
  }
}

/** A hosts file naming the registry, bound over /etc/hosts in ctxagent's own mount namespace. */
export function hostsFile(dir) {
  const path = join(dir, 'hosts')
  writeFileSync(path, `127.0.0.1 localhost\n${FAR_END} ${REGISTRY}\n`, { mode: 0o644 })
  return path
}

const sha = (algo, data, enc) => createHash(algo).update(data).digest(enc)

/** npm packages as tarballs with packuments; `bulk` files of 8 KB in tiny-bulk (the cache's size). */
function npmPackages(registry, scratch, bulk) {
  const packages = {
    'tiny-add': { 'index.js': 'module.exports = (a, b) => Math.round((a + b) * 100) / 100\n' },
    'tiny-fmt': { 'index.js': "const add = require('tiny-add')\nmodule.exports = (cents) => add(cents / 100, 0).toFixed(2) + ' EUR'\n" },
    'tiny-bulk': Object.fromEntries([
      ['index.js', 'module.exports = 1\n'],
      ...Array.from({ length: bulk }, (_, i) => [`data/f${i}.txt`, `${i}`.padEnd(8192, '.')]),
    ]),
  }
  const lock = {}
  for (const [name, files] of Object.entries(packages)) {
    const stage = join(scratch, `pkg-${name}`, 'package')
    const deps = name === 'tiny-fmt' ? { 'tiny-add': '1.0.0' } : {}
    for (const [file, text] of Object.entries({ ...files, 'package.json': JSON.stringify({ name, version: '1.0.0', main: 'index.js', dependencies: deps }) })) {
      mkdirSync(join(stage, file, '..'), { recursive: true })
      writeFileSync(join(stage, file), text)
    }
    mkdirSync(join(registry, name, '-'), { recursive: true })
    const tgz = join(registry, name, '-', `${name}-1.0.0.tgz`)
    execFileSync('tar', ['-czf', tgz, '-C', join(stage, '..'), 'package'])
    const data = readFileSync(tgz)
    const integrity = `sha512-${sha('sha512', data, 'base64')}`
    const tarball = `http://${REGISTRY}/${name}/-/${name}-1.0.0.tgz`
    writeFileSync(
      join(registry, name, 'index.json'),
      JSON.stringify({
        name,
        'dist-tags': { latest: '1.0.0' },
        versions: { '1.0.0': { name, version: '1.0.0', dependencies: deps, dist: { tarball, integrity, shasum: sha('sha1', data, 'hex') } } },
      }),
    )
    lock[`node_modules/${name}`] = { version: '1.0.0', resolved: tarball, integrity, ...(Object.keys(deps).length ? { dependencies: deps } : {}) }
  }
  return lock
}

/** A pure-Python wheel and its PyPI simple index page. */
function pythonPackage(registry) {
  const dir = join(registry, 'files')
  mkdirSync(dir, { recursive: true })
  mkdirSync(join(registry, 'simple', 'tinycalc'), { recursive: true })
  const wheel = join(dir, 'tinycalc-1.0-py3-none-any.whl')
  const script = String.raw`
import base64, hashlib, sys, zipfile
files = {
  'tinycalc/__init__.py': 'def vat(net, rate):\n    return round(net * rate / 100 + 1e-9, 2)\n',
  'tinycalc-1.0.dist-info/METADATA': 'Metadata-Version: 2.1\nName: tinycalc\nVersion: 1.0\n',
  'tinycalc-1.0.dist-info/WHEEL': 'Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n',
}
record = []
with zipfile.ZipFile(sys.argv[1], 'w') as z:
  for name, text in files.items():
    data = text.encode()
    z.writestr(name, data)
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()
    record.append(f'{name},sha256={digest},{len(data)}')
  record.append('tinycalc-1.0.dist-info/RECORD,,')
  z.writestr('tinycalc-1.0.dist-info/RECORD', '\n'.join(record) + '\n')
`
  execFileSync('/usr/bin/python3', ['-c', script, wheel])
  const digest = sha('sha256', readFileSync(wheel), 'hex')
  writeFileSync(
    join(registry, 'simple', 'tinycalc', 'index.html'),
    `<!DOCTYPE html><html><body><a href="/files/tinycalc-1.0-py3-none-any.whl#sha256=${digest}">tinycalc-1.0-py3-none-any.whl</a></body></html>\n`,
  )
}

/** The registry's content: what the fixtures install. */
export function buildRegistry(registry, scratch, bulk) {
  const lock = npmPackages(registry, scratch, bulk)
  pythonPackage(registry)
  return { lock }
}

/**
 * The fixture repositories' files, each with a bug the scripted agent fixes and a test that
 * needs the dependencies: `files(withEnvironment)`, `fix` (the agent's command), `test`.
 */
export function fixtures(lock) {
  const nodeEnv = [
    'setup: |',
    '  npm ci --no-audit --no-fund --no-update-notifier --proxy "$HTTP_PROXY" --cache "$PWD/.npm-cache" --loglevel http',
    `setup_hosts: [${REGISTRY}]`,
    'cache: { paths: [node_modules], key: [package-lock.json] }',
    'test: node test.js',
    '',
  ].join('\n')
  const pkg = { name: 'shop', version: '1.0.0', dependencies: { 'tiny-add': '1.0.0', 'tiny-bulk': '1.0.0', 'tiny-fmt': '1.0.0' } }
  const node = {
    'package.json': `${JSON.stringify(pkg, null, 2)}\n`,
    'package-lock.json': `${JSON.stringify({ name: 'shop', version: '1.0.0', lockfileVersion: 3, requires: true, packages: { '': pkg, ...lock } }, null, 2)}\n`,
    '.npmrc': `registry=http://${REGISTRY}/\n`,
    '.gitignore': 'node_modules\n.npm-cache\n',
  }
  const pyEnv = [
    'setup: |',
    '  /usr/bin/python3 -m venv .venv',
    `  .venv/bin/pip install --no-cache-dir --disable-pip-version-check --index-url http://${REGISTRY}/simple/ --trusted-host ${REGISTRY} --proxy "$HTTP_PROXY" -r requirements.txt`,
    `setup_hosts: [${REGISTRY}]`,
    'cache: { paths: [.venv], key: [requirements.txt] }',
    'test: .venv/bin/python test_vat.py',
    '',
  ].join('\n')
  const python = { 'requirements.txt': 'tinycalc==1.0\n', '.gitignore': '.venv\n' }
  return [
    {
      name: 'node-total',
      files: (env) => ({
        ...node,
        ...(env ? { '.ctxagent/environment.yml': nodeEnv } : {}),
        'total.js': "const add = require('tiny-add')\nmodule.exports = (lines) => lines.reduce((s, l) => add(s, l.net), 0) * 0\n",
        'test.js':
          "const total = require('./total')\nconst fmt = require('tiny-fmt')\nif (total([{ net: 1.1 }, { net: 2.2 }]) !== 3.3) throw new Error('total')\nconsole.log('ok', fmt(330))\n",
      }),
      fix: "sed -i 's/ \\* 0$//' total.js",
      test: 'node test.js',
    },
    {
      name: 'node-format',
      files: (env) => ({
        ...node,
        ...(env ? { '.ctxagent/environment.yml': nodeEnv } : {}),
        'label.js': "const fmt = require('tiny-fmt')\nmodule.exports = (cents) => fmt(cents + 1)\n",
        'test.js': "const label = require('./label')\nif (label(1999) !== '19.99 EUR') throw new Error(label(1999))\nconsole.log('ok')\n",
      }),
      fix: "sed -i 's/cents + 1/cents/' label.js",
      test: 'node test.js',
    },
    {
      name: 'python-vat',
      files: (env) => ({
        ...python,
        ...(env ? { '.ctxagent/environment.yml': pyEnv } : {}),
        'invoice.py': 'from tinycalc import vat\n\ndef total(net):\n    return net + vat(net, 7.0)\n',
        'test_vat.py': 'from invoice import total\nassert total(100) == 107.7, total(100)\nprint("ok")\n',
      }),
      fix: "sed -i 's/7.0/7.7/' invoice.py",
      test: '.venv/bin/python test_vat.py',
    },
  ]
}

const git = (cwd, ...args) => execFileSync('git', ['-c', 'user.name=b', '-c', 'user.email=b@example.com', '-c', 'init.defaultBranch=main', ...args], { cwd })

/** An origin (a bare repository) holding `files` in one commit on main: tasks on its clones share its name, so its cache key. */
export function makeOrigin(dir, files) {
  const work = join(dir, 'work')
  const bare = join(dir, 'repo.git')
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(join(work, path, '..'), { recursive: true })
    writeFileSync(join(work, path), text)
  }
  git(dir, 'init', '--quiet', '--bare', bare)
  git(work, 'init', '--quiet')
  git(work, 'add', '-A')
  git(work, 'commit', '--quiet', '-m', 'start')
  git(work, 'push', '--quiet', bare, 'HEAD:main')
  return bare
}

/** A clone of `bare` at `dir/ws` (its default branch the trusted base), given to the sandbox's user. */
export function cloneOf(bare, dir) {
  const ws = join(dir, 'ws')
  git(dir, 'clone', '--quiet', bare, ws)
  chmodSync(dir, 0o711)
  execFileSync('chown', ['-R', '65534:65534', ws])
  return ws
}
