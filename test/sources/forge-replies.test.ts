import { writeFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { CtxError } from '../../src/errors.js'
import { githubTracker } from '../../src/sources/github.js'
import { githubReviewWatch } from '../../src/sources/github-review.js'
import { gitlabTracker } from '../../src/sources/gitlab.js'
import { gitlabReviewWatch } from '../../src/sources/gitlab-review.js'
import { startFakeGithub } from '../helpers/fake-github.js'
import type { FakeGithub } from '../helpers/fake-github.js'
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

  it("the review loop's reads of a GitHub pull request: a check run without output, a review or status without state, a permission that is not an object", async () => {
    const gh = await startFakeGithub()
    const config = (trusted: string) => parseConfig(`github:\n  api_url: ${gh.url}\n  token: ${gh.token}\nsources:\n  trusted: ${trusted}\n`)
    const pull = { ref: 'acme/shop#101', number: 101, url: '', branch: 'fix-orders', sha: 'abc', opener: '', byBot: true, labels: [] }
    const read = (trusted: string) =>
      githubReviewWatch(config(trusted), 'acme/shop')
        .reviewEvents(pull)
        .then(
          () => 'read',
          (err: unknown) => (err instanceof CtxError ? err.message : String(err)),
        )
    const run = { id: 9, name: 'ci / test', conclusion: 'failure', completed_at: '2026-01-01T00:00:00Z' }
    const status = { id: 3, context: 'ci/lint', state: 'failure', description: 'lint failed', target_url: null, updated_at: '2026-01-01T00:00:00Z' }
    const review = { id: 4, state: 'CHANGES_REQUESTED', user: { login: 'dave' }, author_association: 'NONE', body: 'Rename it.', submitted_at: null }
    const documented = GITHUB_REPLIES(run, status, review)
    // The documented shapes read through: the stand-in answers as GitHub does.
    replyPull(gh, documented)
    expect(await read('any')).toBe('read')
    replyPull(gh, { ...documented, 'check-runs': { total_count: 1, check_runs: [run] } })
    expect(await read('any')).toBe("GitHub's reply to acme/shop#101's check runs of abc is not what its API documents: [0].output is missing")
    const { state: _, ...stateless } = review
    replyPull(gh, { ...documented, reviews: [stateless] })
    expect(await read('any')).toBe("GitHub's reply to acme/shop#101's reviews is not what its API documents: [0].state is missing")
    const { state: __, ...unstated } = status
    replyPull(gh, { ...documented, statuses: [unstated] })
    expect(await read('any')).toBe("GitHub's reply to acme/shop#101's commit statuses of abc is not what its API documents: [0].state is missing")
    // dave is no member (NONE): the collaborator permission API is asked, and its reply is null.
    replyPull(gh, documented)
    gh.replies.push({ method: 'GET', path: '/repos/acme/shop/collaborators/dave/permission', status: 200, body: null })
    expect(await read('write')).toBe(
      "GitHub's reply to acme/shop's permission of dave is not what its API documents: the reply is not as documented (Invalid input: expected object, received null)",
    )
  })
})

/** GitHub's documented replies (docs.github.com/rest/pulls, /rest/checks/runs, /rest/commits/statuses) to the reads of pull 101 at abc. */
function GITHUB_REPLIES(run: object, status: object, review: object): Record<string, unknown> {
  return {
    reviews: [review],
    comments: [],
    'issue-comments': [],
    'check-runs': { total_count: 1, check_runs: [{ ...run, output: { title: 'Tests failed', summary: '2 failed', text: null } }] },
    statuses: [status],
  }
}

/** The next reads of pull 101 at abc answer with these bodies (replies a failed read left unread are dropped). */
function replyPull(gh: FakeGithub, bodies: Record<string, unknown>): void {
  gh.replies.length = 0
  const paths: Record<string, string> = {
    reviews: '/repos/acme/shop/pulls/101/reviews',
    comments: '/repos/acme/shop/pulls/101/comments',
    'issue-comments': '/repos/acme/shop/issues/101/comments',
    'check-runs': '/repos/acme/shop/commits/abc/check-runs',
    statuses: '/repos/acme/shop/commits/abc/statuses',
  }
  for (const [key, path] of Object.entries(paths)) gh.replies.push({ method: 'GET', path, status: 200, body: bodies[key] })
}
