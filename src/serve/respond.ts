import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Caller } from './auth.js'
import { html, page } from './html.js'

/** Every response: nothing inline runs, nothing is framed, nothing is sniffed, nothing cached. */
export const HEADERS: Record<string, string> = {
  'content-security-policy':
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
}

/** What a route gets: the request, who made it, and how to answer. */
export interface Exchange {
  req: IncomingMessage
  res: ServerResponse
  url: URL
  caller: Caller
  api: boolean
}

export function send(res: ServerResponse, status: number, type: string, body: string, extra: Record<string, string> = {}): void {
  res.writeHead(status, { ...HEADERS, 'content-type': type, ...extra })
  res.end(body)
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  send(res, status, 'application/json; charset=utf-8', `${JSON.stringify(body)}\n`)
}

export function sendPage(res: ServerResponse, status: number, body: string): void {
  send(res, status, 'text/html; charset=utf-8', body)
}

export function redirect(res: ServerResponse, to: string): void {
  res.writeHead(303, { ...HEADERS, location: to })
  res.end()
}

export function fail(res: ServerResponse, api: boolean, status: number, message: string, extra: Record<string, string> = {}): void {
  if (res.headersSent) return void res.end()
  if (api) return send(res, status, 'application/json; charset=utf-8', `${JSON.stringify({ error: message })}\n`, extra)
  send(
    res,
    status,
    'text/html; charset=utf-8',
    page({
      title: `Error ${status}`,
      nav: 'tasks',
      operator: null,
      csrf: null,
      body: html`<h1>Error ${String(status)}</h1><p class="notice error" role="alert">${message}</p><p><a href="/">back to the tasks</a></p>`,
    }),
    extra,
  )
}
