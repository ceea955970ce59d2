import { createServer } from 'node:http'
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { CommandEnv } from '../command-env.js'
import { CtxError } from '../errors.js'
import { isUuid } from '../storage/fs/layout.js'
import { runAction, runJobAction, serveAudit } from './actions.js'
import type { ActionInput, ActionName, JobActionName } from './actions.js'
import { SCRIPT, STYLE } from './assets.js'
import { Auth, csrfMatches, isLoopback, returnPath, sessionCookie } from './auth.js'
import type { Caller } from './auth.js'
import { FleetSource } from './fleet-data.js'
import { html, loginHref, page } from './html.js'
import { fail, HEADERS, redirect, send, sendJson, sendPage } from './respond.js'
import type { Exchange } from './respond.js'
import { IndexSource } from './data.js'
import { MetricsCollector } from './metrics.js'
import { BodyError, readBody } from './body.js'
import { ReadRoutes } from './reads.js'
import { LiveFollowers } from './live.js'

export interface ServeOptions {
  host: string
  port: number
  /** serve.token or CTXAGENT_SERVE_TOKEN; null on loopback without one (reads only). */
  token: string | null
}

export interface Served {
  server: Server
  url: string
  close(): Promise<void>
}

export async function startServer(ctx: CommandEnv, options: ServeOptions): Promise<Served> {
  const auth = new Auth(options.token)
  const index = await IndexSource.open(ctx)
  const fleet = new FleetSource(ctx)
  const metrics = new MetricsCollector(ctx, index, fleet)
  const live = new LiveFollowers(ctx, { perTask: ctx.config.serve.max_followers_per_task, total: ctx.config.serve.max_followers })
  metrics.addLive(() => live.counts())
  const reads = new ReadRoutes(ctx, index, fleet, HEADERS, live)
  const loopback = isLoopback(options.host)
  const hosts = new Set(['127.0.0.1', 'localhost', '[::1]', options.host.includes(':') ? `[${options.host}]` : options.host])

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://serve.invalid')
    const api = url.pathname.startsWith('/api/') || url.pathname === '/metrics'
    // A page on another site that resolves its own name to this address (DNS rebinding) sends its own Host.
    const host = (req.headers.host ?? '').replace(/:\d+$/, '')
    if (loopback && !hosts.has(host)) return fail(res, api, 421, `this server answers for ${options.host} only`)
    const caller = auth.caller(req)
    if (caller.kind === 'refused') return fail(res, api, 403, caller.why)
    const x: Exchange = { req, res, url, caller, api }
    const path = url.pathname
    if (req.method === 'GET' && path === '/style.css') return send(res, 200, 'text/css; charset=utf-8', STYLE)
    if (req.method === 'GET' && path === '/favicon.ico') return send(res, 204, 'image/x-icon', '')
    if (req.method === 'GET' && path === '/app.js') return send(res, 200, 'text/javascript; charset=utf-8', SCRIPT)
    if (path === '/login') return login(x)
    if (path === '/logout' && req.method === 'POST') return logout(x)
    // With a token configured, or off loopback, every read needs it too (docs/serve.md#security): a
    // sandboxed command sharing this host's loopback must not read other users' tasks.
    if ((!loopback || auth.hasToken) && caller.kind === 'anonymous') {
      if (!api && req.method === 'GET') return redirect(res, loginHref(returnPath(`${url.pathname}${url.search}`)))
      return fail(res, api, 401, 'sign in first: a bearer token, or the login form', { 'www-authenticate': 'Bearer realm="ctxagent"' })
    }
    const action = /^\/(?:api\/)?tasks\/([^/]+)\/(pause|resume|comment|compress)$/.exec(path)
    if (action !== null) {
      if (req.method !== 'POST') return fail(res, api, 405, 'actions are POST requests', { allow: 'POST' })
      return act(x, action[1] as string, action[2] as ActionName)
    }
    const jobAction = /^\/(?:api\/)?jobs\/(\d{1,15})\/(cancel|retry)$/.exec(path)
    if (jobAction !== null) {
      if (req.method !== 'POST') return fail(res, api, 405, 'actions are POST requests', { allow: 'POST' })
      return actOnJob(x, Number(jobAction[1]), jobAction[2] as JobActionName)
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') return fail(res, api, 405, 'only GET here', { allow: 'GET' })
    if (path === '/metrics') return send(res, 200, metrics.contentType, await metrics.scrape())
    return reads.route(x, operatorOf(caller), csrfOf(caller), !auth.hasToken)
  }

  async function login(x: Exchange): Promise<void> {
    if (x.req.method === 'GET') return sendPage(x.res, 200, loginPage(null, auth.hasToken, returnPath(x.url.searchParams.get('next'))))
    if (x.req.method !== 'POST') return fail(x.res, false, 405, 'GET or POST', { allow: 'GET, POST' })
    const form = await readBody(x.req)
    // Back to the page that sent the operator here, if it is one of this server's.
    const next = returnPath(form.next)
    const signed = auth.hasToken ? auth.signIn(String(form.token ?? ''), typeof form.name === 'string' ? form.name : undefined) : null
    if (signed === null)
      return sendPage(
        x.res,
        403,
        loginPage(
          auth.hasToken
            ? 'that token is not the one serve was started with'
            : 'serve has no token (serve.token or CTXAGENT_SERVE_TOKEN), so no one can sign in',
          auth.hasToken,
          next,
        ),
      )
    serveAudit(ctx, 'serve login', null, signed.session.operator)
    x.res.setHeader('set-cookie', sessionCookie(signed.id))
    return redirect(x.res, next)
  }

  async function logout(x: Exchange): Promise<void> {
    const form = await readBody(x.req)
    if (x.caller.kind === 'session' && csrfMatches(x.caller.session, typeof form.csrf === 'string' ? form.csrf : undefined)) auth.signOut(x.caller.id)
    x.res.setHeader('set-cookie', sessionCookie('', 0))
    return redirect(x.res, '/')
  }

  /** The checks every action passes (token, CSRF for a session's form), then what it was given; null when refused (answered). */
  async function actionInput(x: Exchange): Promise<ActionInput | null> {
    if (!auth.hasToken) {
      fail(x.res, x.api, 403, 'actions need serve.token (or CTXAGENT_SERVE_TOKEN) set where serve runs')
      return null
    }
    if (x.caller.kind === 'anonymous') {
      fail(x.res, x.api, 401, 'actions need the token: a bearer header, or sign in', { 'www-authenticate': 'Bearer realm="ctxagent"' })
      return null
    }
    const form = await readBody(x.req)
    // A session's form must carry its CSRF token (a header for scripts); a bearer header cannot be sent cross-site.
    if (x.caller.kind === 'session') {
      const given = typeof form.csrf === 'string' ? form.csrf : typeof x.req.headers['x-csrf-token'] === 'string' ? x.req.headers['x-csrf-token'] : undefined
      if (!csrfMatches(x.caller.session, given)) {
        fail(x.res, x.api, 403, 'the form is stale or came from another site (CSRF token missing or wrong): reload the page')
        return null
      }
    }
    const operator = operatorOf(x.caller) ?? 'operator'
    const wait = Number(x.url.searchParams.get('wait') ?? form.wait ?? 15)
    const waitMs = Number.isFinite(wait) && wait >= 0 ? Math.min(wait, 120) * 1000 : 15_000
    const text = typeof form.text === 'string' ? form.text : undefined
    const extractive = form.extractive === true || form.extractive === '1' || form.extractive === 'true'
    return { operator, text, extractive, waitMs }
  }

  async function act(x: Exchange, id: string, name: ActionName): Promise<void> {
    if (!isUuid(id)) return fail(x.res, x.api, 400, 'not a task uuid')
    const input = await actionInput(x)
    if (input === null) return
    const result = await runAction(ctx, name, id, input)
    if (x.api) return sendJson(x.res, result.status, result.body)
    return reads.taskPage(x, input.operator, csrfOf(x.caller), false, `${name}: ${result.message}`)
  }

  async function actOnJob(x: Exchange, id: number, name: JobActionName): Promise<void> {
    const input = await actionInput(x)
    if (input === null) return
    const result = await runJobAction(ctx, name, id, input)
    if (x.api) return sendJson(x.res, result.status, result.body)
    return reads.fleetPage(x, input.operator, csrfOf(x.caller), `${name}: ${result.message}`)
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      const url = req.url ?? '/'
      const api = url.startsWith('/api/') || url === '/metrics'
      if (err instanceof CtxError) return fail(res, api, statusOf(err), err.hint ? `${err.message} (${err.hint})` : err.message)
      if (err instanceof BodyError) return fail(res, api, err.status, err.message)
      ctx.io.warn(`serve: ${req.method} ${url.slice(0, 200)} failed: ${(err as Error).message}`)
      fail(res, api, 500, 'the server could not answer (see its log)')
    })
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(options.port, options.host, () => resolve())
  })
  const address = server.address() as AddressInfo
  const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address
  return {
    server,
    url: `http://${shown}:${address.port}`,
    close: async () => {
      live.close()
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
      await fleet.close()
      await index.close()
    },
  }
}

function operatorOf(caller: Caller): string | null {
  return caller.kind === 'bearer' || caller.kind === 'session' ? caller.operator : null
}

function csrfOf(caller: Caller): string | null {
  return caller.kind === 'session' ? caller.session.csrf : null
}

/** docs/contract.md §9's exit codes as HTTP statuses: usage 400, not found 404, conflict 409, the rest 500. */
function statusOf(err: CtxError): number {
  return err.exitCode === 2 ? 400 : err.exitCode === 3 ? 404 : err.exitCode === 4 ? 409 : 500
}

function loginPage(error: string | null, hasToken: boolean, next: string) {
  return page({
    title: 'Sign in',
    nav: 'login',
    operator: null,
    csrf: null,
    body: html`<h1>Sign in</h1>${error === null ? '' : html`<p class="notice error" role="alert">${error}</p>`}
${hasToken ? '' : html`<p class="muted">serve was started without a token: reads work on loopback, actions do not.</p>`}
<form method="post" action="/login" class="login"><input type="hidden" name="next" value="${next}"><label>Your name (for the audit log) <input name="name" autocomplete="username" pattern="[A-Za-z0-9._@+\\-]{1,64}"></label>
<label>Token <input name="token" type="password" autocomplete="current-password" required></label><button>Sign in</button></form>`,
  })
}
