import { describe, expect, it } from 'vitest'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { reindex, startServe } from './helpers.js'

const COMMIT = 'abcdef0123456789abcdef0123456789abcdef01'

/** The task page's facts: what follows `<dt>Delivered</dt>`, or null when the page has no such line. */
function deliveredLine(body: string): string | null {
  return /<dt>Delivered<\/dt><dd>(.*?)<\/dd>/s.exec(body)?.[1] ?? null
}

/** docs/serve.md: a task page shows the change's delivery (docs/delivery.md#what-is-recorded): the PR/MR as a link, else the branch or why not. */
describe('the task page’s Delivered line', () => {
  it('links the PR/MR, every word of it escaped; a branch, a refusal and a URL that is no web address are text; no delivery, no line', async () => {
    const tree = makeTree()
    // A branch name git accepts, holding what HTML gives a meaning to; a PR URL with a query.
    const branch = 'fix/<b>x</b>&"q"'
    const url = 'https://github.example/acme/shop/pull/7?a=1&b=2'
    tree.write({ uuid: uuidN(1), state: { delivery: { mode: 'pr', branch, commit: COMMIT, pushed: true, pr: { number: 7, url }, refused: null } } })
    tree.write({
      uuid: uuidN(2),
      state: { delivery: { mode: 'branch', branch: 'ctxagent/task-00000002', commit: COMMIT, pushed: false, pr: null, refused: null } },
    })
    tree.write({
      uuid: uuidN(3),
      state: { delivery: { mode: 'pr', branch: null, commit: null, pushed: false, pr: null, refused: 'not delivered: .env matches deliver.exclude <script>' } },
    })
    // A URL the forge never gives (a hand-edited state.json): never a link.
    tree.write({
      uuid: uuidN(4),
      state: { delivery: { mode: 'pr', branch: 'b', commit: COMMIT, pushed: true, pr: { number: 9, url: 'javascript:alert(1)' }, refused: null } },
    })
    tree.write({ uuid: uuidN(5) })
    tree.write({
      uuid: uuidN(6),
      state: {
        delivery: { mode: 'pr', branch: 'ctxagent/task-00000006', commit: COMMIT, pushed: true, pr: null, refused: 'delivery failed: GitHub answered 422' },
      },
    })
    reindex(tree)
    const s = await startServe(tree.base)
    const page = async (n: number): Promise<string> => {
      const res = await s.get(`/tasks/${uuidN(n)}`)
      expect(res.status).toBe(200)
      return res.text()
    }
    const escapedUrl = 'https://github.example/acme/shop/pull/7?a=1&amp;b=2'
    expect(deliveredLine(await page(1))).toBe(
      `<a href="${escapedUrl}">PR/MR #7 ${escapedUrl} (branch fix/&lt;b&gt;x&lt;/b&gt;&amp;&quot;q&quot; (abcdef012345), pushed)</a>`,
    )
    expect(deliveredLine(await page(2))).toBe('branch ctxagent/task-00000002 (abcdef012345)')
    // Said once, though the refusal of the change's files begins with the same words.
    expect(deliveredLine(await page(3))).toBe('not delivered: .env matches deliver.exclude &lt;script&gt;')
    expect(deliveredLine(await page(6))).toBe('branch ctxagent/task-00000006 (abcdef012345), pushed; not delivered: delivery failed: GitHub answered 422')
    const fourth = await page(4)
    expect(deliveredLine(fourth)).toBe('PR/MR #9 javascript:alert(1) (branch b (abcdef012345), pushed)')
    expect(fourth).not.toContain('href="javascript:')
    const fifth = await page(5)
    expect(fifth).toContain('<dt>Status</dt>')
    expect(deliveredLine(fifth)).toBeNull()
  })
})
