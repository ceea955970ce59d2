import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { expectNoPiece, filler } from '../helpers/secret-pieces.js'
import { onlyTask, runSetup } from '../run/harness.js'
import { record } from './report.js'

/*
 * Issue #36: a key printed whole, but across the point where a long output is cut into
 * head and tail (or where a long line is cut), reached the task files and the LLM in
 * two unmasked pieces. A real run, a scripted model, the key at every offset across
 * run_command's head cut and read_file's line cut.
 */

const KEY = 'sk-proj-Q7vLm2Xc9RtB4nKp8WzY3hJd6FgA1sE5uT0o'
const finish = { calls: [{ name: 'finish', arguments: { summary: 'read it', status: 'done' } }] }

/** Every file under `dir`, as text. */
function allText(dir: string): string {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .map((name) => join(dir, name))
    .filter((path) => statSync(path).isFile())
    .map((path) => readFileSync(path, 'latin1'))
    .join('\n')
}

describe('a secret across the cut', () => {
  it("at every offset across run_command's head cut and read_file's line cut: no piece in the task files or the requests", async () => {
    const s = await runSetup('tools:\n  sandbox: none\n')
    const offsets = Array.from({ length: KEY.length + 1 }, (_, k) => k)
    for (const k of offsets) {
      // run_command keeps the first 14,900 characters; read_file the first 2,000 of a line.
      writeFileSync(join(s.ws, `out${k}.txt`), `${filler(14_900 - k - 1)} ${KEY} ${filler(40_000)}`)
      writeFileSync(join(s.ws, `line${k}.txt`), `${filler(2000 - k - 1)} ${KEY} ${filler(3000)}\nshort line\n`)
    }
    // The agent's requests (those offering tools) get the script; compaction's get a summary.
    const script = [
      ...offsets.map((k) => ({
        calls: [
          { name: 'run_command', arguments: { command: `cat out${k}.txt` } },
          { name: 'read_file', arguments: { path: `line${k}.txt` } },
        ],
      })),
      finish,
    ]
    const summary = s.fake.fallback
    s.fake.fallback = (req) => (Array.isArray(req.body.tools) ? (script.shift() ?? finish) : summary(req))
    const res = await s.run(['run', '--task', 'read the logs', '--workspace', s.ws, '--allow-shell', '--max-turns', '200'])
    expect(res.code, res.stderr).toBe(0)
    const task = onlyTask(s.tree)
    expect(task.tools.filter((t) => t.status === 'success')).toHaveLength(2 * offsets.length + 1)
    expectNoPiece(allText(task.dir), KEY)
    for (const r of s.fake.requests) expectNoPiece(r.raw.toString(), KEY)
    expect(allText(task.dir)).toContain('[OPENAI_KEY]')
    record('hostile-output', { offsets: offsets.length, cuts: 2 })
  }, 180_000)
})
