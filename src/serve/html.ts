import { forTerminal } from '../terminal-text.js'
import { grouped } from '../text.js'

/**
 * HTML made from text that is data (a statement, a comment, a tool's output, a model's
 * answer): terminal escapes stripped, then every character HTML gives a meaning to
 * escaped. Nothing from a task reaches the page any other way.
 */
export function esc(value: unknown): string {
  const text =
    typeof value === 'string' ? value : value === null || value === undefined ? '' : typeof value === 'object' ? JSON.stringify(value, null, 2) : String(value)
  return forTerminal(text).replace(/[&<>"'`]/g, (c) => ENTITIES[c] as string)
}

const ENTITIES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;', '`': '&#96;' }

/** Markup already made safe (by `html` or `esc`): kept as it is when interpolated. */
export class Safe {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text
  }
}

/** A template whose interpolations are escaped unless they are Safe (or arrays of Safe). */
export function html(strings: TemplateStringsArray, ...values: unknown[]): Safe {
  let out = strings[0] ?? ''
  values.forEach((value, i) => {
    out += part(value) + (strings[i + 1] ?? '')
  })
  return new Safe(out)
}

function part(value: unknown): string {
  if (value instanceof Safe) return value.text
  if (Array.isArray(value)) return value.map(part).join('')
  if (value === false || value === null || value === undefined) return ''
  return esc(value)
}

export interface PageOptions {
  title: string
  /** The navigation entry to mark as the current one. */
  nav: 'tasks' | 'fleet' | 'stats' | 'outcomes' | 'evals' | 'login'
  body: Safe
  /** Who is signed in (null: not signed in; reads on loopback need no sign-in). */
  operator: string | null
  csrf: string | null
  /** The page needs /app.js (the live stream of a running task). */
  script?: boolean
  /** This page's path and query: signing in from it returns here. */
  here?: string
  /** Seconds between the page's quiet refreshes of what it shows (the task list, the fleet); absent or 0: none. */
  refresh?: number
}

/** The sign-in page, returning to `here` (a path on this server) once signed in. */
export function loginHref(here: string | undefined): string {
  return here === undefined || here === '/' ? '/login' : `/login?next=${encodeURIComponent(here)}`
}

/** The frame of every page: one stylesheet and at most one script, both served from this server (CSP: 'self'). */
export function page(o: PageOptions): string {
  const link = (href: string, name: PageOptions['nav'], label: string) =>
    html`<a href="${href}"${o.nav === name ? new Safe(' aria-current="page"') : ''}>${label}</a>`
  const who =
    o.operator === null
      ? html`<a href="${loginHref(o.here)}">sign in</a>`
      : html`<form method="post" action="/logout" class="inline"><input type="hidden" name="csrf" value="${o.csrf ?? ''}"><span>${o.operator}</span> <button>sign out</button></form>`
  return `<!doctype html>
${
  html`<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${o.title} · ctxagent</title><link rel="stylesheet" href="/style.css">${o.script || (o.refresh ?? 0) > 0 ? new Safe('<script src="/app.js" defer></script>') : ''}</head>
<body><header><strong>ctxagent</strong><nav>${link('/', 'tasks', 'Tasks')}${link('/fleet', 'fleet', 'Fleet')}${link('/stats', 'stats', 'Stats')}${link('/outcomes', 'outcomes', 'Pull requests')}${link('/evals', 'evals', 'Evals')}</nav><div class="who">${who}</div></header>
<main${(o.refresh ?? 0) > 0 ? new Safe(` data-refresh="${Math.floor(o.refresh ?? 0)}"`) : ''}>${o.body}</main></body></html>`.text
}
`
}

/** A count as 12,345. */
export function num(n: number | null | undefined): string {
  return grouped(n ?? 0)
}

/** How long ago, roughly: 5s, 3m, 2h, 4d. */
export function ago(iso: string | null | undefined, now: Date): string {
  if (!iso) return '-'
  const ms = now.getTime() - Date.parse(iso)
  if (Number.isNaN(ms)) return '-'
  const s = Math.max(0, Math.round(ms / 1000))
  if (s < 120) return `${s}s`
  if (s < 7200) return `${Math.round(s / 60)}m`
  if (s < 172_800) return `${Math.round(s / 3600)}h`
  return `${Math.round(s / 86_400)}d`
}

export function usd(cost: number | null): string {
  return cost === null ? '-' : `$${cost.toFixed(cost < 1 ? 4 : 2)}`
}
