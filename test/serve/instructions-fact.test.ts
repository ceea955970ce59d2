import { describe, expect, it } from 'vitest'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { reindex, startServe } from './helpers.js'

/** The task page's facts: what follows `<dt>Instructions</dt>`, or null when the page has no such line. */
function instructionsLine(body: string): string | null {
  return /<dt>Instructions<\/dt><dd>(.*?)<\/dd>/s.exec(body)?.[1] ?? null
}

/** docs/environments.md#project-instructions: the task page names the instruction files a task was given, escaped. */
describe('the task page’s Instructions line', () => {
  it('names each file, its size, whether it was cut and the base; what was not read; no instructions, no line', async () => {
    const tree = makeTree()
    const blob = '0123456789abcdef0123456789abcdef01234567'
    tree.write({
      uuid: uuidN(1),
      state: {
        instructions: {
          source: 'commit',
          base: 'origin/HEAD at 0123456789ab',
          files: [{ path: 'AGENTS.md', bytes: 40000, id: blob, truncated: true }],
          refused: [],
        },
      },
    })
    tree.write({
      uuid: uuidN(2),
      state: { instructions: { source: 'workspace', base: "the workspace's own files", files: [], refused: ['AGENTS.md is a symbolic link <b>'] } },
    })
    tree.write({ uuid: uuidN(3) })
    reindex(tree)
    const s = await startServe(tree.base)
    const page = async (n: number): Promise<string> => {
      const res = await s.get(`/tasks/${uuidN(n)}`)
      expect(res.status).toBe(200)
      return res.text()
    }
    expect(instructionsLine(await page(1))).toBe('AGENTS.md (40000 bytes, cut) from origin/HEAD at 0123456789ab')
    expect(instructionsLine(await page(2))).toBe('none given; not read: AGENTS.md is a symbolic link &lt;b&gt;')
    expect(instructionsLine(await page(3))).toBeNull()
  })
})
