import { writeFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { CtxError } from '../../src/errors.js'
import { githubTracker } from '../../src/sources/github.js'
import { gitlabTracker } from '../../src/sources/gitlab.js'
import { gitlabReviewWatch } from '../../src/sources/gitlab-review.js'
import { startFakeGithub } from '../helpers/fake-github.js'
import { startFakeGitlab } from '../helpers/fake-gitlab.js'
import { runSetup } from '../run/harness.js'

/** What `run` off a terminal says last on stderr: its JSON log's error line (docs/contract.md §8). */
function lastError(stderr: string): Record<string, unknown> {
  expect(stderr).not.toContain('Cannot read properties')
  return JSON.parse(stderr.trim().split('\n').pop() as string) as Record<string, unknown>
}

/**
 * A forge reply without a field its API documents (another server at the configured URL,
 * a proxy, an API that changed) is one line naming the forge, the request and the field
 * (docs/contract.md §8), never a TypeError from where the field is read; nothing is created.
 */
describe("a forge reply that is not the documented shape, where a task's source reads it", () => {
  it('run --github: an issue without labels, and comments without created_at, are one line each; no task', { timeout: 120_000 }, async () => {
    const gh = await startFakeGithub()
    const s = await runSetup()
    writeFileSync(s.config, s.fake.configYaml(`github:\n  api_url: ${gh.url}\n  token: ${gh.token}\n`))
    const { labels: _, ...unlabelled } = gh.issue
    gh.replies.push({ method: 'GET', path: '/repos/acme/shop/issues/42', status: 200, body: unlabelled })
    const first = await s.run(['run', '--github', 'acme/shop#42', '--workspace', s.ws])
    expect(first.code).toBe(1)
    expect(lastError(first.stderr)).toMatchObject({
      level: 'error',
      msg: "GitHub's reply to acme/shop#42 is not what its API documents: labels is missing",
      hint: "check github.api_url: is the forge's API answering there?",
      exit_code: 1,
    })
    gh.addComment('carol', 'Happens with one order too.')
    gh.replies.push({ method: 'GET', path: '/repos/acme/shop/issues/42/comments', status: 200, body: [{ id: 5, body: 'hi', user: null }] })
    const second = await s.run(['run', '--github', 'acme/shop#42', '--workspace', s.ws])
    expect(second.code).toBe(1)
    expect(lastError(second.stderr).msg).toBe("GitHub's reply to acme/shop#42's comments is not what its API documents: [0].created_at is missing")
    expect(s.tree.layout.list('running')).toEqual([])
    expect(s.fake.requests).toHaveLength(0)
  })

  it('run --gitlab: a note without its author is one line; no task', { timeout: 120_000 }, async () => {
    const gl = await startFakeGitlab()
    const s = await runSetup()
    writeFileSync(s.config, s.fake.configYaml(`gitlab:\n  url: ${gl.url}\n  token: ${gl.token}\n`))
    delete gl.addNote('carol', 'Still skips a page.').author
    const res = await s.run(['run', '--gitlab', 'acme/backend/api#7', '--workspace', s.ws])
    expect(res.code).toBe(1)
    expect(lastError(res.stderr).msg).toBe("GitLab's reply to acme/backend/api#7's notes is not what its API documents: [0].author is missing")
    expect(s.tree.layout.list('running')).toEqual([])
  })

  it("the poller's listings: items without labels are one line naming the listing", async () => {
    const gh = await startFakeGithub()
    const github = githubTracker(parseConfig(`github:\n  api_url: ${gh.url}\n  token: ${gh.token}\n`), 'acme/shop')
    gh.replies.push({ method: 'GET', path: '/repos/acme/shop/issues', status: 200, body: [{ number: 42 }] })
    const listed = github.listOpen('ctxagent').catch((err: unknown) => err)
    expect(await listed).toBeInstanceOf(CtxError)
    expect(String(((await listed) as Error).message)).toBe(
      "GitHub's reply to acme/shop's open issues labelled ctxagent is not what its API documents: [0].labels is missing",
    )
    const gl = await startFakeGitlab()
    const { labels: _, ...unlabelled } = gl.item
    const gitlab = gitlabTracker(parseConfig(`gitlab:\n  url: ${gl.url}\n  token: ${gl.token}\n`), 'acme/backend/api')
    gl.item = unlabelled
    const now = await gitlab.current('acme/backend/api#7').catch((err: unknown) => err)
    expect(now).toBeInstanceOf(CtxError)
    expect((now as Error).message).toBe("GitLab's reply to acme/backend/api#7 is not what its API documents: labels is missing")
  })

  it("the review loop's read of a merge request's notes: a note without its author is one line", async () => {
    const gl = await startFakeGitlab({ mr: true })
    const config = parseConfig(`gitlab:\n  url: ${gl.url}\n  token: ${gl.token}\nsources:\n  trusted: any\n`)
    delete gl.addNote('carol', 'Use the cursor.').author
    const pull = { ref: 'acme/backend/api!12', number: 12, url: '', branch: 'fix-pagination', sha: 'abc', opener: '', byBot: true, labels: [] }
    const events = await gitlabReviewWatch(config, 'acme/backend/api')
      .reviewEvents(pull)
      .catch((err: unknown) => err)
    expect(events).toBeInstanceOf(CtxError)
    expect((events as Error).message).toBe("GitLab's reply to acme/backend/api!12's notes is not what its API documents: [0].author is missing")
  })
})
