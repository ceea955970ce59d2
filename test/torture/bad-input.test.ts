import { execFileSync } from 'node:child_process'
import { mkdirSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { makeTree } from '../fixtures/tree.js'
import type { Tree } from '../fixtures/tree.js'
import { cliAsync } from '../helpers/run.js'
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
    // A few at a time: each is a whole CLI process.
    for (let i = 0; i < cases.length; i += 4) {
      await Promise.all(
        cases.slice(i, i + 4).map(async (c) => {
          const args = c.args.map((a) => a.replaceAll('{base}', tree.base))
          const home = args.includes('--home') ? [] : ['--home', tree.base]
          const res = await cliAsync([...args, ...home], { OPENAI_API_KEY: 'sk-torture-not-a-real-key', ...c.env })
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

/** A FIFO, and paused tasks whose files are links out of the task or a FIFO (outside/ stands for "anywhere else"). */
function plantTraps(tree: Tree): void {
  execFileSync('mkfifo', [join(tree.base, 'fifo')])
  mkdirSync(join(tree.base, 'outside'))
  writeFileSync(join(tree.base, 'outside', 'victim.jsonl'), '{"secret":true}\n')
  writeFileSync(join(tree.base, 'outside', 'state.json'), '{"status":"failed","error":"read from outside"}\n')
  const linked = tree.write({ uuid: LINKED, location: 'paused', messages: 6 })
  // A local task, so that resuming it needs no GitHub token.
  const meta = JSON.parse(readFileSync(join(linked, 'metadata.json'), 'utf8')) as { task_key: Record<string, unknown> }
  writeFileSync(join(linked, 'metadata.json'), JSON.stringify({ ...meta, task_key: { ...meta.task_key, task_source: 'local', owner: null, task_type: 'task' } }))
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
