import { existsSync, lstatSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { makeTree, uuidN } from '../fixtures/tree.js'
import type { Tree } from '../fixtures/tree.js'
import { cli } from '../helpers/run.js'
import { cliIn } from '../helpers/in-process.js'
import type { CliResult } from '../helpers/run.js'
import { snapshotTree } from '../helpers/tree-snapshot.js'

const PAUSED = uuidN(0xc1)
const CHAT_PAUSED = uuidN(0xc2)
const CHAT_ENDED = uuidN(0xc3)

/** Every file (content, mtime, mode) and every directory: nothing may be written, nothing created. */
function snapshot(base: string): Record<string, string> {
  const dirs: Record<string, string> = {}
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name)
      if (lstatSync(path).isDirectory()) {
        dirs[`${relative(base, path)}/`] = 'dir'
        walk(path)
      }
    }
  }
  walk(base)
  return { ...snapshotTree(base), ...dirs }
}

/** A tree with a paused plain task, a paused chat session and an ended one, plus a regular file. */
function fixture(): Tree {
  const tree = makeTree()
  tree.write({ uuid: PAUSED, location: 'paused', messages: 40, summaries: 0, tools: 0 })
  for (const [uuid, location] of [
    [CHAT_PAUSED, 'paused'],
    [CHAT_ENDED, 'completed'],
  ] as const) {
    const dir = tree.write({ uuid, location, messages: 4 })
    const metadata = JSON.parse(readFileSync(join(dir, 'metadata.json'), 'utf8')) as Record<string, unknown>
    writeFileSync(join(dir, 'metadata.json'), `${JSON.stringify({ ...metadata, run: { chat: true } }, null, 2)}\n`)
  }
  writeFileSync(join(tree.base, 'file.txt'), 'not a directory\n')
  return tree
}

function scratch(): string {
  const dir = mkdtempSync(join(tmpdir(), 'ctxagent-validation-'))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

const ENV = { CTXAGENT_CONFIG: '', OPENAI_API_KEY: '', GITHUB_TOKEN: '', GITLAB_TOKEN: '', CTXAGENT_NOW: '' }

/** Runs the CLI against the tree (with --home unless the arguments or CTXAGENT_HOME name one) and checks that nothing changed. */
function refused(tree: Tree, args: string[], env: Record<string, string> = {}): CliResult & { line: string } {
  const before = snapshot(tree.base)
  const named = args.includes('--home') || env.CTXAGENT_HOME !== undefined
  const res = cli([...args, ...(named ? [] : ['--home', tree.base])], { ...ENV, ...env })
  expect(snapshot(tree.base), 'the tree changed').toEqual(before)
  expect(existsSync(join(tree.base, 'audit.jsonl')), 'audit.jsonl was written').toBe(false)
  const lines = res.stderr.trimEnd().split('\n')
  expect(lines, res.stderr).toHaveLength(1)
  const line = lines[0] as string
  expect(line).toMatch(/^ctxagent: .+ \(.+\)$/)
  expect(line.length).toBeLessThan(400)
  return { ...res, line }
}

type Case = [string, (base: string) => string[], number, RegExp, Record<string, string>?]

function cases(list: Case[]) {
  it.each(list)('%s', (_name, args, code, message, env = {}) => {
    const tree = fixture()
    const res = refused(tree, args(tree.base), env)
    expect(res.code, res.stderr).toBe(code)
    expect(res.line).toMatch(message)
    expect(res.stdout).toBe('')
  })
}

describe('1. stats of a task tree that does not exist', () => {
  const NO_TREE = /^ctxagent: there is no task tree at .*\/missing\/tree \(check --home, CTXAGENT_HOME or context\.base_dir\)$/
  cases([
    ['stats --home <missing>', (base) => ['stats', '--home', join(base, 'missing/tree')], 3, NO_TREE],
    ['stats --json --home <missing>', (base) => ['stats', '--json', '--home', join(base, 'missing/tree')], 3, NO_TREE],
    ['stats --check --home <missing> (UNKNOWN, not OK)', (base) => ['stats', '--check', '--home', join(base, 'missing/tree')], 3, NO_TREE],
    [
      'stats --check via CTXAGENT_HOME <missing>',
      (_base) => ['stats', '--check'],
      3,
      /there is no task tree at/,
      { CTXAGENT_HOME: '/nonexistent/ctxagent/tree' },
    ],
  ])

  it('still reports an existing but empty tree as 0 tasks', async () => {
    const base = scratch()
    const res = await cliIn(['stats', '--json', '--home', base], ENV)
    expect(res.code, res.stderr).toBe(0)
    expect(JSON.parse(res.stdout)).toMatchObject({ total: 0 })
    const check = await cliIn(['stats', '--check', '--home', base], ENV)
    expect(check.stdout).toMatch(/^CTXAGENT (OK|WARNING|CRITICAL) - /)
  })
})

describe('2. chat: flags are checked before the task is looked up or anything written', () => {
  cases([
    ['chat --no-wait without --send', () => ['chat', CHAT_PAUSED, '--no-wait'], 2, /^ctxagent: --no-wait applies only to --send \(add --send TEXT/],
    ['chat --no-wait without --send, a task that does not exist', () => ['chat', uuidN(0xdead), '--no-wait'], 2, /--no-wait applies only to --send/],
    ['chat --end --no-wait', () => ['chat', CHAT_PAUSED, '--end', '--no-wait'], 2, /--no-wait applies only to --send/],
    [
      'chat --send --no-wait --timeout',
      () => ['chat', CHAT_PAUSED, '--send', 'hi', '--no-wait', '--timeout', '1m'],
      2,
      /--timeout and --no-wait exclude each other/,
    ],
    ['chat --send --end on a task that is not a chat', () => ['chat', PAUSED, '--send', 'hi', '--end'], 2, /--send and --end exclude each other/],
    // Refusals that are conflicts (exit 4) write no audit line either.
    ['chat (attach) to a paused session', () => ['chat', CHAT_PAUSED], 4, /task .* is paused \(resume it/],
    ['chat --send to a paused session (waiting)', () => ['chat', CHAT_PAUSED, '--send', 'hi'], 4, /is paused; no one would answer/],
    ['chat --send to an ended session', () => ['chat', CHAT_ENDED, '--send', 'hi', '--no-wait'], 4, /has ended/],
  ])

  it('still queues with --send --no-wait, and audits it', async () => {
    const tree = fixture()
    const res = cli(['chat', CHAT_PAUSED, '--send', 'later', '--no-wait', '--home', tree.base], ENV)
    expect(res.code, res.stderr).toBe(0)
    expect(res.stdout).toMatch(/queued for task/)
    expect(readFileSync(join(tree.base, 'audit.jsonl'), 'utf8')).toContain(CHAT_PAUSED)
  })
})

describe('3. contradictory or empty filters', () => {
  cases([
    ['view --messages --all --limit 5', () => ['view', PAUSED, '--messages', '--all', '--limit', '5'], 2, /^ctxagent: --limit and --all exclude each other/],
    ['view --limit on the overview', () => ['view', PAUSED, '--limit', '5'], 2, /--limit applies to a listing, not to the overview/],
    ['view --all --full on the overview', () => ['view', PAUSED, '--all', '--full'], 2, /--all and --full apply to a listing/],
    ['view --summaries --hidden', () => ['view', PAUSED, '--summaries', '--hidden'], 2, /--hidden shows hidden messages/],
    ['view --tools --follow', () => ['view', PAUSED, '--tools', '--follow'], 2, /--follow streams messages, not --tools/],
    [
      'stats with a reversed range',
      () => ['stats', '--from', '2024-02-01', '--to', '2024-01-01'],
      2,
      /^ctxagent: --from is not before --to, so no task could match/,
    ],
    ['stats with an empty range of times', () => ['stats', '--from', '2024-01-01T12:00:00Z', '--to', '2024-01-01T12:00:00Z'], 2, /--from is not before --to/],
    ['stats --user empty', () => ['stats', '--user', ''], 2, /--user .* must be 1 to 200 printable characters/],
    ['stats --user blank', () => ['stats', '--user', '  '], 2, /--user .* must be 1 to 200 printable characters/],
    [
      'stats --check --status failed',
      () => ['stats', '--check', '--status', 'failed'],
      2,
      /^ctxagent: --check evaluates the whole task tree; --status cannot narrow it/,
    ],
    ['stats --check --user --from', () => ['stats', '--check', '--user', 'alice', '--from', '2024-01-01'], 2, /--user, --from cannot narrow it/],
    [
      'stats --check on a missing tree with a filter: usage first',
      (base) => ['stats', '--check', '--status', 'failed', '--home', join(base, 'missing')],
      2,
      /--check evaluates the whole task tree/,
    ],
  ])

  it('still lists with --limit or --all alone, and a --to day includes that day', async () => {
    const tree = fixture()
    const two = await cliIn(['view', PAUSED, '--messages', '--limit', '2', '--json', '--home', tree.base], ENV)
    expect(two.stdout.trim().split('\n')).toHaveLength(2)
    const all = await cliIn(['view', PAUSED, '--messages', '--all', '--json', '--home', tree.base], ENV)
    expect(all.stdout.trim().split('\n')).toHaveLength(40)
    const oneDay = await cliIn(['stats', '--json', '--from', '2024-01-15', '--to', '2024-01-15', '--user', ' notfolder ', '--home', tree.base], ENV)
    expect(oneDay.code, oneDay.stderr).toBe(0)
    expect(JSON.parse(oneDay.stdout)).toMatchObject({ total: 3 })
  })
})

describe('4. compress --dry-run needs no LLM', () => {
  it('plans without an API key, writes nothing and says the real run needs one', async () => {
    const tree = fixture()
    const before = snapshot(tree.base)
    const res = cli(['compress', PAUSED, '--dry-run', '--home', tree.base], ENV)
    expect(res.code, res.stderr).toBe(0)
    expect(res.stdout).toMatch(/^dry run: task /)
    expect(res.stdout).toContain('nothing was written')
    expect(res.stderr.trimEnd().split('\n')).toHaveLength(1)
    expect(res.stderr).toMatch(/no OpenAI API key is set: this plan assumes an LLM summary/)
    expect(snapshot(tree.base)).toEqual(before)
  })

  cases([['compress without --dry-run still needs the key', () => ['compress', PAUSED], 2, /no OpenAI API key is set/]])
})

describe('5. issue and merge request numbers', () => {
  const GH = /^ctxagent: --github .*: the issue or pull request number must be a whole number from 1 to 2147483647 \(e\.g\. --github acme\/shop#42\)$/
  const GL = /^ctxagent: --gitlab .*: the issue or merge request number must be a whole number from 1 to 2147483647 \(e\.g\. --gitlab/
  cases([
    ['--github a/b#0', () => ['run', '--github', 'a/b#0'], 2, GH],
    ['--github a/b#00', () => ['run', '--github', 'a/b#00'], 2, GH],
    ['--github a/b#2147483648', () => ['run', '--github', 'a/b#2147483648'], 2, GH],
    ['--github a/b#99999999999999999999', () => ['run', '--github', 'a/b#99999999999999999999'], 2, GH],
    ['--gitlab g/p#0', () => ['run', '--gitlab', 'g/p#0'], 2, GL],
    ['--gitlab g/p!0', () => ['run', '--gitlab', 'g/p!0'], 2, GL],
    ['--gitlab g/p!99999999999999999999', () => ['run', '--gitlab', 'g/p!99999999999999999999'], 2, GL],
    // The largest number passes the reference check; what stops it here is the missing token.
    [
      '--github a/b#2147483647 gets as far as the token',
      () => ['run', '--github', 'a/b#2147483647'],
      2,
      /no GitHub token is set/,
      { OPENAI_API_KEY: 'sk-test' },
    ],
    [
      '--gitlab g/p!2147483647 gets as far as the token',
      () => ['run', '--gitlab', 'g/p!2147483647'],
      2,
      /no GitLab token is set/,
      { OPENAI_API_KEY: 'sk-test' },
    ],
  ])
})

describe('6. CTXAGENT_NOW', () => {
  const NOW = /^ctxagent: CTXAGENT_NOW '.*' is not an ISO 8601 date-time \(give one like 2024-01-31T12:00:00Z, or unset CTXAGENT_NOW\)$/
  cases([
    ['garbage', () => ['stats'], 2, NOW, { CTXAGENT_NOW: 'garbage' }],
    ['a day that does not exist', () => ['stats'], 2, NOW, { CTXAGENT_NOW: '2024-02-30' }],
    ['a time on a day that does not exist, with an offset', () => ['view', PAUSED], 2, NOW, { CTXAGENT_NOW: '2024-02-30T10:00:00+02:00' }],
    ['an hour 24', () => ['chat', CHAT_PAUSED, '--send', 'x', '--no-wait'], 2, NOW, { CTXAGENT_NOW: '2024-01-01T24:00:00Z' }],
    ['a time without a zone', () => ['stats'], 2, NOW, { CTXAGENT_NOW: '2024-01-01T10:00:00' }],
  ])

  it('still pins the clock to a valid time', async () => {
    const tree = fixture()
    const res = await cliIn(['view', PAUSED, '--home', tree.base], { ...ENV, CTXAGENT_NOW: '2024-02-01T00:00:00.000Z' })
    expect(res.code, res.stderr).toBe(0)
    expect(readFileSync(join(tree.base, 'audit.jsonl'), 'utf8')).toContain('"ts":"2024-02-01T00:00:00.000Z"')
  })
})

describe('7. no command', () => {
  cases([
    ['--home X and no command', (base) => ['--home', base], 2, /^ctxagent: no command given \(run ctxagent --help for the list\)$/],
    ['--json and no command', () => ['--json'], 2, /^ctxagent: no command given \(run ctxagent --help for the list\)$/],
  ])

  it('prints the help on stdout with exit 0 when there are no arguments at all; --help and --version work', async () => {
    const bare = cli([], ENV)
    expect(bare.code).toBe(0)
    expect(bare.stdout).toMatch(/^Usage: ctxagent/)
    expect(bare.stderr).toBe('')
    const help = await cliIn(['--help'], ENV)
    expect(help.code).toBe(0)
    expect(help.stdout).toMatch(/^Usage: ctxagent/)
    expect((await cliIn(['--version'], ENV)).stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/)
    expect((await cliIn(['help', 'stats'], ENV)).stdout).toMatch(/^Usage: ctxagent stats/)
  })
})

describe('8. every invalid --home is a usage error in one short line', () => {
  const LONG = 'a'.repeat(4000)
  cases([
    [
      '--home under a regular file',
      (base) => ['stats', '--home', join(base, 'file.txt', 'sub')],
      2,
      /^ctxagent: --home .*file\.txt\/sub is not a directory: a part of its path is a file \(give the directory of the task tree\)$/,
    ],
    [
      '--home under a regular file, for view',
      (base) => ['view', PAUSED, '--home', join(base, 'file.txt', 'sub')],
      2,
      /--home .* is not a directory: a part of its path is a file/,
    ],
    [
      '--home under a regular file, for cleanup',
      (base) => ['cleanup', '--home', join(base, 'file.txt', 'sub')],
      2,
      /--home .* is not a directory: a part of its path is a file/,
    ],
    [
      'CTXAGENT_HOME under a regular file',
      () => ['stats'],
      2,
      /^ctxagent: CTXAGENT_HOME .* is not a directory: a part of its path is a file/,
      { CTXAGENT_HOME: '/etc/passwd/sub' },
    ],
    [
      'a 4,000-character --home',
      (base) => ['stats', '--home', join(base, LONG)],
      2,
      /^ctxagent: --home .{60}…a{99} is too long for the file system \(\d{4} characters\) \(give a shorter path\)$/,
    ],
    ['a 4,000-character --home, for reindex', (base) => ['reindex', '--home', join(base, LONG)], 2, /--home .* is too long for the file system/],
    ['a 4,000-character --home, for run', (base) => ['run', '--task', 'x', '--home', join(base, LONG)], 2, /--home .* is too long for the file system/],
  ])
})
