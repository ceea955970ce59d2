import { readFileSync } from 'node:fs'
import { request } from 'node:http'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { makeTree, uuidN } from '../fixtures/tree.js'
import { cli } from '../helpers/run.js'
import { configWith, reindex, startServe, TOKEN, writeMessages } from './helpers.js'

function fixture() {
  const tree = makeTree()
  tree.write({ uuid: uuidN(1), user: 'alice', createdAt: '2024-01-10T10:00:00.000Z' })
  tree.write({ uuid: uuidN(2), user: 'bob', status: 'failed', createdAt: '2024-01-11T10:00:00.000Z' })
  tree.write({ uuid: uuidN(3), user: 'alice', location: 'paused', createdAt: '2024-01-12T10:00:00.000Z' })
  reindex(tree)
  return tree
}

const CLI = (tree: ReturnType<typeof makeTree>, args: string[]) => cli([...args, '--home', tree.base, '--config', 'none', '--json'])

describe('serve: reads', () => {
  it('/api gives the CLI --json shapes: list, view, stats', async () => {
    const tree = fixture()
    const s = await startServe(tree.base)
    const listed = await s.get('/api/tasks')
    expect(listed.status).toBe(200)
    expect(listed.headers.get('x-total-count')).toBe('3')
    const rows = (await listed.text())
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as unknown)
    const cliRows = CLI(tree, ['list', '--all'])
      .stdout.trim()
      .split('\n')
      .map((l) => JSON.parse(l) as unknown)
    expect(rows).toEqual(cliRows)
    const one = await (await s.get(`/api/tasks/${uuidN(2)}`)).json()
    expect(one).toEqual(JSON.parse(CLI(tree, ['view', uuidN(2)]).stdout))
    const stats = await (await s.get('/api/stats')).json()
    expect(stats).toEqual(JSON.parse(CLI(tree, ['stats']).stdout))
    const filtered = await s.get('/api/tasks?user=alice&status=paused')
    expect(
      (await filtered.text())
        .trim()
        .split('\n')
        .map((l) => (JSON.parse(l) as { uuid: string }).uuid),
    ).toEqual([uuidN(3)])
  })

  it('pages are escaped data under a strict CSP; bad ids and paths are refused', async () => {
    const tree = fixture()
    writeMessages(tree.dir({ uuid: uuidN(1) }), [
      { role: 'system', content: 'sys' },
      { role: 'user', content: '<img src=x onerror=alert(1)><script>alert(2)</script>\u001b]52;c;aGk=\u0007done' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'read_file', arguments: '{"path":"</pre><b>x</b>"}' } }] },
      { role: 'tool', tool_name: 'read_file', tool_call_id: 'c1', content: '<iframe src=//evil>' },
    ])
    const s = await startServe(tree.base)
    const res = await s.get(`/tasks/${uuidN(1)}`)
    expect(res.status).toBe(200)
    expect(res.headers.get('content-security-policy')).toContain("default-src 'self'")
    expect(res.headers.get('content-security-policy')).toContain("script-src 'self'")
    const body = await res.text()
    expect(body).toContain('&lt;img src=x onerror=alert(1)&gt;&lt;script&gt;alert(2)&lt;/script&gt;')
    expect(body).not.toContain('<img src=x')
    expect(body).not.toContain('<iframe')
    expect(body).not.toContain('\u001b')
    expect(body).toContain('&lt;/pre&gt;&lt;b&gt;x&lt;/b&gt;')
    expect(body).not.toMatch(/<script>(?!<\/script>)/)
    for (const path of [
      '/tasks/not-a-uuid',
      '/tasks/..%2F..%2Fetc%2Fpasswd',
      '/api/tasks/00000001',
      '/tasks/%2e%2e/%2e%2e/etc/passwd',
      '/tasks/00000001-0000-4000-8000-000000000001%2F..%2F..',
    ]) {
      expect([400, 404], path).toContain((await s.get(path)).status)
    }
    expect((await s.get(`/api/tasks/${uuidN(99)}`)).status).toBe(404)
    expect((await s.get('/api/tasks?offset=-1')).status).toBe(400)
    expect((await s.get('/etc/passwd')).status).toBe(404)
    // DNS rebinding: a page of another site that resolves its name here sends its own Host.
    const rebound = await new Promise<number>((resolve, reject) => {
      request(`${s.url}/api/tasks`, { headers: { host: 'evil.example' } }, (res) => (res.resume(), resolve(res.statusCode ?? 0)))
        .on('error', reject)
        .end()
    })
    expect(rebound).toBe(421)
  })
})

describe('serve: security', () => {
  it('off loopback: exit 2 without a token; reads and actions need it', async () => {
    const tree = fixture()
    const res = cli(['serve', '--host', '0.0.0.0', '--port', '0', '--home', tree.base, '--config', 'none'])
    expect(res.code).toBe(2)
    expect(res.stderr).toMatch(/^ctxagent: serving on 0\.0\.0\.0 \(not loopback\) needs a token \(.*\)\n$/)
    const s = await startServe(tree.base, { args: ['--host', '0.0.0.0'], env: { CTXAGENT_SERVE_TOKEN: TOKEN } })
    const base = s.url.replace('0.0.0.0', '127.0.0.1')
    expect((await fetch(`${base}/api/tasks`)).status).toBe(401)
    expect((await fetch(`${base}/`, { redirect: 'manual' })).headers.get('location')).toBe('/login')
    expect((await fetch(`${base}/api/tasks`, { headers: { authorization: 'Bearer wrong-token-wrong-token' } })).status).toBe(403)
    expect((await fetch(`${base}/api/tasks`, { headers: { authorization: `Bearer ${TOKEN}` } })).status).toBe(200)
    expect(s.err()).not.toContain(TOKEN)
  })

  it('on loopback with a token configured: every read needs it (a process of this host is no one in particular); doctor says when reads are open', async () => {
    const tree = fixture()
    const running = uuidN(4)
    tree.write({ uuid: running, user: 'carol', location: 'running', createdAt: '2024-01-13T10:00:00.000Z' })
    reindex(tree)
    const config = configWith(tree, `serve:\n  token: ${TOKEN}\n`)
    for (const [env, name] of [
      [{}, 'serve.token'],
      [{ CTXAGENT_SERVE_TOKEN: TOKEN }, 'CTXAGENT_SERVE_TOKEN'],
    ] as const) {
      const s = await startServe(tree.base, name === 'serve.token' ? { config } : { env })
      for (const path of ['/api/tasks', `/api/tasks/${uuidN(1)}`, '/api/stats', '/metrics', `/api/tasks/${running}/events`]) {
        const res = await s.get(path)
        expect(res.status, `${name} ${path}`).toBe(401)
        expect(res.headers.get('www-authenticate')).toBe('Bearer realm="ctxagent"')
      }
      for (const path of ['/', `/tasks/${uuidN(1)}`, `/tasks/${running}/events`, '/stats', '/fleet'])
        expect((await s.get(path)).headers.get('location'), path).toBe(path === '/' ? '/login' : `/login?next=${encodeURIComponent(path)}`)
      // What the login page itself needs stays open.
      for (const path of ['/login', '/style.css', '/app.js']) expect((await s.get(path)).status, path).toBe(200)
      const bearer = { headers: { authorization: `Bearer ${TOKEN}` } }
      for (const path of ['/api/tasks', `/tasks/${uuidN(1)}`, '/metrics']) expect((await s.get(path, bearer)).status, path).toBe(200)
      const login = await s.get('/login', {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ token: TOKEN, name: 'gina' }).toString(),
      })
      const cookie = (login.headers.get('set-cookie') ?? '').split(';')[0] as string
      expect((await s.get(`/tasks/${uuidN(1)}`, { headers: { cookie } })).status).toBe(200)
    }
    // Without a token, loopback reads stay open, and doctor says so; with one, doctor says every read needs it.
    const open = await startServe(tree.base)
    expect((await open.get('/api/tasks')).status).toBe(200)
    const line = (args: string[], env: Record<string, string> = {}) =>
      (
        JSON.parse(cli(['doctor', '--json', '--timeout', '1s', '--home', tree.base, ...args], env).stdout) as {
          checks: { name: string; status: string; message: string }[]
        }
      ).checks.find((c) => c.name === 'serve')
    expect(line(['--config', 'none'])).toMatchObject({
      status: 'warn',
      message: expect.stringContaining("no serve.token: on 127.0.0.1 serve's reads (task pages, /api, /metrics) are open to every process of this host"),
    })
    expect(line(['--config', config])).toMatchObject({ status: 'ok', message: expect.stringContaining('need it on 127.0.0.1 as on every address') })
    expect(line(['--config', 'none'], { CTXAGENT_SERVE_TOKEN: TOKEN })).toMatchObject({ status: 'ok' })
    expect(line(['--config', 'none'], { CTXAGENT_SERVE_TOKEN: 'short' })).toMatchObject({
      status: 'fail',
      message: expect.stringContaining('CTXAGENT_SERVE_TOKEN is shorter than 16 characters'),
    })
  })

  it('actions: 403 with no token configured, 401 without one, 403 with a wrong one or a missing CSRF token, done with it and audited', async () => {
    const tree = fixture()
    const paused = uuidN(3)
    const open = await startServe(tree.base)
    expect(
      (
        await open.get(`/api/tasks/${paused}/comment`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ text: 'hi' }),
        })
      ).status,
    ).toBe(403)
    const config = configWith(tree, `serve:\n  token: ${TOKEN}\n`)
    const s = await startServe(tree.base, { config })
    const post = (path: string, headers: Record<string, string>, body: string) => s.get(path, { method: 'POST', headers, body })
    const json = { 'content-type': 'application/json' }
    expect((await post(`/api/tasks/${paused}/comment`, json, JSON.stringify({ text: 'hi' }))).status).toBe(401)
    expect((await post(`/api/tasks/${paused}/comment`, { ...json, authorization: 'Bearer nope-nope-nope-nope' }, JSON.stringify({ text: 'hi' }))).status).toBe(
      403,
    )
    const done = await post(
      `/api/tasks/${paused}/comment`,
      { ...json, authorization: `Bearer ${TOKEN}`, 'x-ctxagent-operator': 'carol' },
      JSON.stringify({ text: 'please add tests' }),
    )
    expect(done.status).toBe(200)
    expect(await done.json()).toMatchObject({ uuid: paused, location: 'paused', record: { kind: 'message', sender: 'carol', content: 'please add tests' } })
    const inbox = readFileSync(join(tree.dir({ uuid: paused, location: 'paused' }), 'inbox.jsonl'), 'utf8')
    expect(inbox).toContain('please add tests')
    const audit = readFileSync(join(tree.base, 'audit.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>)
    expect(audit.find((a) => a.command === 'comment')).toMatchObject({ uuid: paused, via: 'serve', operator: 'carol' })
    // A finished task: the CLI's own refusal, as 409.
    const finished = await post(`/api/tasks/${uuidN(1)}/comment`, { ...json, authorization: `Bearer ${TOKEN}` }, JSON.stringify({ text: 'x' }))
    expect(finished.status).toBe(409)
    expect(((await finished.json()) as { error: string }).error).toMatch(/is finished \(in completed\/\)/)
    // Resume with no fleet: says how.
    const resume = await post(`/api/tasks/${paused}/resume`, { authorization: `Bearer ${TOKEN}` }, '')
    expect(resume.status).toBe(409)
    expect(((await resume.json()) as { error: string }).error).toContain(`ctxagent run --resume ${paused}`)
    // A session: the login form sets an HttpOnly SameSite=Strict cookie; a form without its CSRF token is refused.
    const login = await post('/login', { 'content-type': 'application/x-www-form-urlencoded' }, new URLSearchParams({ token: TOKEN, name: 'dave' }).toString())
    expect(login.status).toBe(303)
    const cookie = login.headers.get('set-cookie') ?? ''
    expect(cookie).toMatch(/HttpOnly/)
    expect(cookie).toMatch(/SameSite=Strict/)
    const session = cookie.split(';')[0] as string
    const form = { 'content-type': 'application/x-www-form-urlencoded', cookie: session }
    expect((await post(`/tasks/${paused}/comment`, form, 'text=no+csrf')).status).toBe(403)
    const pageHtml = await (await s.get(`/tasks/${paused}`, { headers: { cookie: session } })).text()
    const csrf = /name="csrf" value="([^"]+)"/.exec(pageHtml)?.[1] as string
    expect(csrf).toBeTruthy()
    const ok = await post(`/tasks/${paused}/comment`, form, new URLSearchParams({ csrf, text: 'from the form' }).toString())
    expect(ok.status).toBe(200)
    expect(await ok.text()).toContain('comment: comment ')
    expect(readFileSync(join(tree.dir({ uuid: paused, location: 'paused' }), 'inbox.jsonl'), 'utf8')).toContain('"sender":"dave"')
    expect(s.err()).not.toContain(TOKEN)
  })

  it('signing in returns to the page that sent the operator there, never to another site', async () => {
    const tree = fixture()
    const paused = uuidN(3)
    const s = await startServe(tree.base, { args: ['--host', '0.0.0.0'], env: { CTXAGENT_SERVE_TOKEN: TOKEN } })
    const base = s.url.replace('0.0.0.0', '127.0.0.1')
    const get = (path: string, headers: Record<string, string> = {}) => fetch(`${base}${path}`, { redirect: 'manual', headers })
    // Off loopback a read sends to sign in, remembering where from; the form carries it.
    const sent = (await get(`/tasks/${paused}?all=1`)).headers.get('location') as string
    expect(sent).toBe(`/login?next=${encodeURIComponent(`/tasks/${paused}?all=1`)}`)
    expect(await (await get(sent)).text()).toContain(`<input type="hidden" name="next" value="/tasks/${paused}?all=1">`)
    const signIn = (next: string, token = TOKEN) =>
      fetch(`${base}/login`, {
        method: 'POST',
        redirect: 'manual',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ token, name: 'erin', next }).toString(),
      })
    const back = await signIn(`/tasks/${paused}?all=1`)
    expect(back.status).toBe(303)
    expect(back.headers.get('location')).toBe(`/tasks/${paused}?all=1`)
    const session = (back.headers.get('set-cookie') ?? '').split(';')[0] as string
    expect((await get(`/tasks/${paused}?all=1`, { cookie: session })).status).toBe(200)
    // A wrong token: the form again, still returning there.
    expect(await (await signIn('/fleet', 'wrong-token-wrong-token')).text()).toContain('<input type="hidden" name="next" value="/fleet">')
    // Anything that could lead off this server goes to /.
    for (const next of [
      '//evil.example/x',
      '/\\evil.example',
      'https://evil.example/',
      'javascript:alert(1)',
      '/x\r\nSet-Cookie: a=b',
      '/login',
      '/logout',
      ' /fleet',
      '',
    ]) {
      expect([next, (await signIn(next)).headers.get('location')]).toEqual([next, '/'])
    }
    // On loopback too, with a token configured, a read sends to sign in and comes back to the page.
    const local = await startServe(tree.base, { env: { CTXAGENT_SERVE_TOKEN: TOKEN } })
    expect((await local.get(`/tasks/${paused}`)).headers.get('location')).toBe(`/login?next=%2Ftasks%2F${paused}`)
  })
})
