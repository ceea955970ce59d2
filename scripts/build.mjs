// npm run build: tsc → dist/, then scripts/bundle.mjs → bundle/. Each build ends by writing
// bundle/.built-from, a hash of what it was built from (the sources, the build's own scripts and
// configs, the locked libraries). `--if-changed` (npm test, bench and torture) builds only when
// that hash differs from the inputs now, or an output is missing: `npm test -- one.test.ts`
// after an edit of a test alone, and CI's tests after `npm ci` built the same tree, skip the
// ~25 s of a build that would write the same files (docs/development.md#tests).
import { spawnSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = fileURLToPath(new URL('..', import.meta.url))
const stamp = join(root, 'bundle', '.built-from')
const OUTPUTS = ['dist/cli.js', 'bundle/start.js', 'bundle/cli.js', 'bundle/run/cli.js']
const INPUTS = [
  'package.json',
  'package-lock.json',
  // What npm ci or npm install put in node_modules (the bundle holds the libraries' code).
  'node_modules/.package-lock.json',
  'tsconfig.json',
  'tsconfig.build.json',
  'scripts/build.mjs',
  'scripts/bundle.mjs',
]

/** The hash of every input's path and bytes (a missing input counts as missing). */
function inputsHash() {
  const hash = createHash('sha256')
  const files = [
    ...INPUTS,
    ...readdirSync(join(root, 'src'), { recursive: true, withFileTypes: true })
      .filter((e) => e.isFile())
      .map((e) => join(e.parentPath, e.name).slice(root.length))
      .sort(),
  ]
  for (const file of files) {
    const path = join(root, file)
    hash.update(`${file}\0`).update(existsSync(path) ? readFileSync(path) : '\0missing\0')
  }
  return hash.digest('hex')
}

function step(args) {
  const res = spawnSync(process.execPath, args, { cwd: root, stdio: 'inherit' })
  if (res.status !== 0) process.exit(res.status ?? 1)
}

const inputs = inputsHash()
if (process.argv.includes('--if-changed')) {
  const built = existsSync(stamp) ? readFileSync(stamp, 'utf8').trim() : null
  if (built === inputs && OUTPUTS.every((f) => existsSync(join(root, f)))) {
    process.stderr.write('build: dist/ and bundle/ are up to date (the sources and libraries are those of the last build)\n')
    process.exit(0)
  }
}
// Gone while this build runs: tsc writes dist/ even when it reports errors, so a build that fails
// (or is interrupted) leaves outputs of no stamped state, and the next --if-changed builds again.
rmSync(stamp, { force: true })
step([join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json'])
step([join(root, 'scripts', 'bundle.mjs')])
// Stamped only if nothing changed while it built: an edit made meanwhile builds again next time.
if (inputsHash() === inputs) writeFileSync(stamp, `${inputs}\n`)
