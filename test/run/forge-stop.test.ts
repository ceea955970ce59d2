import { writeFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { startFakeGithub } from '../helpers/fake-github.js'
import { exitOf } from '../helpers/wait.js'
import { readTask, runSetup, waitFor } from './harness.js'

describe('a forge wait takes the stop', () => {
  it('SIGINT while GitHub says to wait an hour (a rate limit that resets then) for the status comment: the task is paused within seconds', async () => {
    const gh = await startFakeGithub()
    const s = await runSetup()
    writeFileSync(s.config, s.fake.configYaml(`github:\n  api_url: ${gh.url}\n  token: ${gh.token}\n  bot_name: ctxagent-bot\n`))
    gh.failures.push({ method: 'POST', path: '/repos/acme/shop/issues/42/comments', status: 403, message: 'API rate limit exceeded', headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': String(Math.floor(Date.now() / 1000) + 3600) } })
    const started = s.start(['run', '--github', 'acme/shop#42', '--workspace', s.ws])
    await waitFor('the rate-limited post', () => gh.requests.some((r) => r.method === 'POST'))
    const uuid = await waitFor('the task', () => s.tree.layout.list('running')[0])
    started.child.kill('SIGINT')
    // Given up STOPPING_GRACE_MS after the stop, the task settles; no LLM request was made.
    await waitFor('the task to be paused', () => readTask(s.tree, uuid).location === 'paused', 60_000)
    expect(started.err()).toMatch(/gave up trying to update the status comment on acme\/shop#42: the task is stopping/)
    expect(readTask(s.tree, uuid).state).toMatchObject({ status: 'paused' })
    expect(s.fake.requests).toHaveLength(0)
    // Octokit's own timer for the hour-long wait is out of reach here: the test ends the process.
    started.child.kill('SIGKILL')
    await exitOf(started.child)
  })
})
