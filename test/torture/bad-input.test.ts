import { execFileSync, spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdirSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { makeTree } from '../fixtures/tree.js'
import type { Tree } from '../fixtures/tree.js'
import { cliAuto } from '../helpers/in-process.js'
import { BIN, cliAsync, ROOT, TEST_ENV } from '../helpers/run.js'
import { exitOf } from '../helpers/wait.js'
import { snapshotTree } from '../helpers/tree-snapshot.js'
import { BAD_CONFIGS, corpus, DEVICE_STATE, FIFO_STATE, LINKED, LINKED_STATE, TASK } from './corpus.js'
import { record } from './report.js'

/**
 * The bad-input corpus (issue 12): every command and option given wrong input must
 * exit with the documented code, print one stderr line that names the problem, and
 * leave the task tree byte-for-byte as it was.
 */
describe('torture: bad input', () => {
  const cases = corpus()

  it(`has at least 120 cases (${cases.length})`, () => {
    expect(cases.length).toBeGreaterThanOrEqual(120)
  })

  it('refuses each with its exit code, one line, and an unchanged tree', { timeout: 600_000 }, async () => {
    const tree = makeTree()
    tree.write({ uuid: TASK, location: 'paused', messages: 12, tools: 3 })
    writeFileSync(join(tree.base, 'file.txt'), 'a file\n')
    mkdirSync(join(tree.base, 'configs'))
    for (const [name, text] of BAD_CONFIGS) writeFileSync(join(tree.base, `${name}.yaml`), text)
    plantTraps(tree)
    const before = snapshotTree(tree.base)
    const wrong: string[] = []
    // A few at a time: a command that owns its process (run, chat, …) is a whole CLI process; the
    // others run in this one (test/helpers/in-process.ts), all of them as processes under npm run torture.
    for (let i = 0; i < cases.length; i += 4) {
      await Promise.all(
        cases.slice(i, i + 4).map(async (c) => {
          const args = c.args.map((a) => a.replaceAll('{base}', tree.base))
          const home = args.includes('--home') ? [] : ['--home', tree.base]
          const res = await cliAuto([...args, ...home], { OPENAI_API_KEY: 'sk-torture-not-a-real-key', ...c.env })
          const lines = res.stderr.trimEnd().split('\n')
          const problems = [
            res.code !== c.code ? `exit ${res.code}, expected ${c.code}` : null,
            lines.length !== 1 ? `${lines.length} stderr lines` : null,
            !/^ctxagent: /.test(lines[0] ?? '') ? 'no "ctxagent: " prefix' : null,
            !c.says.test(lines[0] ?? '') ? `does not say ${c.says}` : null,
            (lines[0]?.length ?? 0) > 400 ? 'line over 400 characters' : null,
          ].filter((p) => p !== null)
          if (problems.length > 0) wrong.push(`${c.name}: ${problems.join('; ')} — ${res.stderr.slice(0, 300).trim()}`)
        }),
      )
    }
    const changed = snapshotTree(tree.base)
    const unchanged = JSON.stringify(changed) === JSON.stringify(before)
    record('bad-input', { tried: cases.length, right: cases.length - wrong.length, tree_unchanged: unchanged })
    expect(wrong).toEqual([])
    expect(changed).toEqual(before)
  })
})

describe('torture: a task from standard input is bounded as a file is (issue #27 item 15)', () => {
  it('--task-file - refuses past 1 MB as --task-file FILE does, and stops reading there: the writer is cut off long before 60 MB', {
    timeout: 120_000,
  }, async () => {
    const tree = makeTree()
    const before = snapshotTree(tree.base)
    const big = join(tree.base, 'big.txt')
    writeFileSync(big, 'x'.repeat((1 << 20) + 1))
    const fromFile = await cliAsync(['run', '--task-file', big, '--home', tree.base, '--config', 'none', '--provider', 'replay', '--replay-from', big])
    expect(fromFile.code).toBe(2)
    expect(fromFile.stderr).toMatch(/^ctxagent: task file .*big\.txt is 1,048,577 bytes; the limit is 1 MB \(give a readable text file of at most 1 MB\)\n$/)

    const child = spawn(
      process.execPath,
      [BIN, 'run', '--task-file', '-', '--home', tree.base, '--config', 'none', '--provider', 'replay', '--replay-from', big],
      { cwd: ROOT, env: { ...process.env, ...TEST_ENV }, stdio: ['pipe', 'pipe', 'pipe'] },
    )
    let stderr = ''
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
    child.stdin.on('error', () => undefined)
    // Written until the reader is gone (EPIPE) or 60 MB are in: a bounded reader stops near 1 MB.
    const chunk = Buffer.alloc(256 * 1024, 'y')
    let written = 0
    const exited = exitOf(child)
    while (written < 60 * (1 << 20) && child.stdin.writable && child.exitCode === null) {
      const ok = child.stdin.write(chunk)
      written += chunk.length
      if (!ok) await Promise.race([once(child.stdin, 'drain').catch(() => undefined), exited])
    }
    child.stdin.destroy()
    const { code } = await exited
    expect(code).toBe(2)
    expect(stderr).toBe('ctxagent: task file - (standard input) is more than 1,048,576 bytes; the limit is 1 MB (give a task of at most 1 MB)\n')
    expect(written).toBeLessThan(16 * (1 << 20))
    rmSync(big)
    expect(snapshotTree(tree.base)).toEqual(before)
  })

  it('--task-file - takes a task under the bound', async () => {
    const tree = makeTree()
    const child = spawn(process.execPath, [BIN, 'enqueue', '--task-file', '-', '--home', tree.base, '--config', 'none'], {
      cwd: ROOT,
      env: { ...process.env, ...TEST_ENV },
      stdio: ['pipe', 'pipe', 'pipe'],
    })
    let stderr = ''
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
    child.stdin.end('fix the totals\n')
    expect((await exitOf(child)).code).toBe(2)
    // Read in full and accepted as a task: what stops it is the missing database, not the input.
    expect(stderr).toMatch(/needs the fleet's PostgreSQL database/)
  })
})

/** A FIFO, and paused tasks whose files are links out of the task or a FIFO (outside/ stands for "anywhere else"). */
function plantTraps(tree: Tree): void {
  execFileSync('mkfifo', [join(tree.base, 'fifo')])
  mkdirSync(join(tree.base, 'outside'))
  writeFileSync(join(tree.base, 'outside', 'victim.jsonl'), '{"secret":true}\n')
  writeFileSync(join(tree.base, 'outside', 'state.json'), '{"status":"failed","error":"read from outside"}\n')
  const linked = tree.write({ uuid: LINKED, location: 'paused', messages: 6 })
  // A local task, so that resuming it needs no GitHub token.
  const meta = JSON.parse(readFileSync(join(linked, 'metadata.json'), 'utf8')) as { task_key: Record<string, unknown> }
  writeFileSync(
    join(linked, 'metadata.json'),
    JSON.stringify({ ...meta, task_key: { ...meta.task_key, task_source: 'local', owner: null, task_type: 'task' } }),
  )
  renameSync(join(linked, 'messages.jsonl'), join(tree.base, 'outside', 'messages.jsonl'))
  symlinkSync(join(tree.base, 'outside', 'messages.jsonl'), join(linked, 'messages.jsonl'))
  rmSync(join(linked, 'inbox.jsonl'), { force: true })
  symlinkSync(join(tree.base, 'outside', 'victim.jsonl'), join(linked, 'inbox.jsonl'))
  const fifo = tree.write({ uuid: FIFO_STATE, location: 'paused', messages: 2 })
  rmSync(join(fifo, 'state.json'))
  execFileSync('mkfifo', [join(fifo, 'state.json')])
  // /dev/zero's device (1, 5): reads never end. Where mknod is not allowed, a FIFO stands in.
  const device = tree.write({ uuid: DEVICE_STATE, location: 'paused', messages: 2 })
  rmSync(join(device, 'state.json'))
  try {
    execFileSync('mknod', [join(device, 'state.json'), 'c', '1', '5'], { stdio: 'ignore' })
  } catch {
    execFileSync('mkfifo', [join(device, 'state.json')])
  }
  const linkedState = tree.write({ uuid: LINKED_STATE, location: 'paused', messages: 2 })
  rmSync(join(linkedState, 'state.json'))
  symlinkSync(join(tree.base, 'outside', 'state.json'), join(linkedState, 'state.json'))
}
