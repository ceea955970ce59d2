import { html, num } from './html.js'
import type { Safe } from './html.js'

export interface Bar {
  label: string
  /** Stacked parts, drawn in order. */
  parts: { name: string; value: number }[]
}

const COLOURS = ['#2457c5', '#7aa2ff', '#a15c00', '#137a3a', '#b42318', '#7a5af8', '#0b6b8f']

/**
 * A horizontal stacked bar chart as SVG, drawn on the server: no chart library and no
 * script. Labels are escaped text like everything else on the page. Drawn as a labelled
 * chart (each row's label on a line above its bar), so that it reads at a phone's width.
 */
export function barChart(title: string, bars: Bar[], format: (n: number) => string = num): Safe {
  if (bars.length === 0) return html`<p class="muted">no tasks here yet</p>`
  const names = [...new Set(bars.flatMap((b) => b.parts.map((p) => p.name)))]
  const colour = (name: string) => COLOURS[names.indexOf(name) % COLOURS.length] as string
  return labelledChart(
    title,
    bars.map((b) => ({
      label: b.label,
      figure: format(b.parts.reduce((s, p) => s + p.value, 0)),
      parts: b.parts.map((p) => ({ name: p.name, value: p.value, colour: colour(p.name) })),
    })),
    format,
  )
}

/** One row of a labelled chart: its label and figure on a line, then its bar. */
export interface LabelledBar {
  label: string
  /** What the row's figure says, at the right of the label's line. */
  figure: string
  /** Drawn in order; a part with `apart` is drawn after a gap (counted apart: still open). */
  parts: { name: string; value: number; colour: string; apart?: boolean }[]
}

/** The labelled chart's width in its own units: at a phone's width (390 px) one unit is about one pixel, so its 11 px text stays 11 px. */
const NARROW = 340

/**
 * A chart that stays readable at a phone's width: each row's label and figure on a line
 * of their own above its bar, in a viewBox about as wide as a phone's card (CSS caps how
 * far it grows on a laptop: `svg.labelled`). Drawn on the server, no script.
 */
export function labelledChart(title: string, rows: LabelledBar[], format: (n: number) => string = num): Safe {
  if (rows.length === 0) return html`<p class="muted">nothing here yet</p>`
  const legendNames = [...new Map(rows.flatMap((r) => r.parts.map((p) => [p.name, p.colour] as const))).entries()]
  const legend = legendNames.length > 1 ? 20 : 0
  const gap = rows.some((r) => r.parts.some((p) => p.apart)) ? 6 : 0
  const max = Math.max(1e-12, ...rows.map((r) => r.parts.reduce((s, p) => s + p.value, 0)))
  const scale = (NARROW - gap - 2) / max
  const rowH = 36
  const drawn = rows.map((r, i) => {
    const y = legend + i * rowH
    let x = 1
    let apart = false
    const rects = r.parts.map((p) => {
      if (p.apart === true && !apart) {
        apart = true
        x += gap
      }
      const w = p.value * scale
      const rect = html`<rect x="${x.toFixed(1)}" y="${String(y + 17)}" width="${Math.max(0, w).toFixed(1)}" height="12" fill="${p.colour}"><title>${r.label}: ${p.name} ${format(p.value)}</title></rect>`
      x += w
      return rect
    })
    return html`<text x="1" y="${String(y + 12)}">${clipTo(r.label, 30)}</text><text x="${String(NARROW - 1)}" y="${String(y + 12)}" text-anchor="end">${r.figure}</text>${rects}`
  })
  let at = 1
  const keys = legendNames.map(([name, colour]) => {
    const key = html`<rect x="${String(at)}" y="4" width="10" height="10" fill="${colour}"></rect><text x="${String(at + 14)}" y="13">${name}</text>`
    at += 24 + Math.ceil(name.length * 6.5)
    return key
  })
  const height = legend + rows.length * rowH
  return html`<svg class="labelled" role="img" aria-label="${title}" viewBox="0 0 ${String(NARROW)} ${String(height)}" width="100%" preserveAspectRatio="xMinYMin meet"><title>${title}</title>${legend > 0 ? keys : ''}${drawn}</svg>`
}

function clipTo(label: string, n: number): string {
  return label.length > n ? `${label.slice(0, n - 1)}…` : label
}

/** One estimate with its interval, as a row of `intervalChart`. */
export interface Interval {
  label: string
  value: number
  low: number
  high: number
}

/**
 * Estimates with their 95 % intervals on one axis from `min` to `max`, zero marked: a
 * whisker from low to high and a dot at the estimate, the figures above each. Narrow
 * like `labelledChart`, so it reads at a phone's width.
 */
export function intervalChart(title: string, rows: Interval[], min: number, max: number, format: (n: number) => string): Safe {
  if (rows.length === 0) return html`<p class="muted">nothing to compare yet</p>`
  const span = max - min || 1
  const x = (v: number) => 4 + ((Math.min(max, Math.max(min, v)) - min) / span) * (NARROW - 8)
  const rowH = 40
  const height = rows.length * rowH + 16
  const zero = x(0)
  const drawn = rows.map((r, i) => {
    const y = i * rowH
    return html`<text x="1" y="${String(y + 12)}">${clipTo(r.label, 24)}</text><text x="${String(NARROW - 1)}" y="${String(y + 12)}" text-anchor="end">${format(r.value)} [${format(r.low)}, ${format(r.high)}]</text>
<line x1="${x(r.low).toFixed(1)}" x2="${x(r.high).toFixed(1)}" y1="${String(y + 26)}" y2="${String(y + 26)}" stroke="#2457c5" stroke-width="3"><title>95 % interval: ${format(r.low)} to ${format(r.high)}</title></line>
<circle cx="${x(r.value).toFixed(1)}" cy="${String(y + 26)}" r="5" fill="#2457c5"><title>${r.label}: ${format(r.value)}</title></circle>`
  })
  return html`<svg class="labelled" role="img" aria-label="${title}" viewBox="0 0 ${String(NARROW)} ${String(height)}" width="100%" preserveAspectRatio="xMinYMin meet"><title>${title}</title>${drawn}
<line x1="${zero.toFixed(1)}" x2="${zero.toFixed(1)}" y1="16" y2="${String(height - 14)}" stroke="#98a2b3" stroke-dasharray="3 3"></line>
<text x="4" y="${String(height - 2)}">${format(min)}</text><text x="${zero.toFixed(1)}" y="${String(height - 2)}" text-anchor="middle">0</text><text x="${String(NARROW - 4)}" y="${String(height - 2)}" text-anchor="end">${format(max)}</text></svg>`
}
