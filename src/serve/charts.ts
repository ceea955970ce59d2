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
 * script. Labels are escaped text like everything else on the page.
 */
export function barChart(title: string, bars: Bar[], format: (n: number) => string = num): Safe {
  if (bars.length === 0) return html`<p class="muted">no tasks here yet</p>`
  const names = [...new Set(bars.flatMap((b) => b.parts.map((p) => p.name)))]
  const colour = (name: string) => COLOURS[names.indexOf(name) % COLOURS.length] as string
  const max = Math.max(1, ...bars.map((b) => b.parts.reduce((s, p) => s + p.value, 0)))
  const row = 22
  const labelW = 130
  const barW = 300
  const legend = names.length > 1 ? 20 : 0
  const height = bars.length * row + legend + 4
  const rows = bars.map((b, i) => {
    const y = legend + i * row
    let x = labelW
    const rects = b.parts.map((p) => {
      const w = (p.value / max) * barW
      const rect = html`<rect x="${x.toFixed(1)}" y="${String(y + 3)}" width="${Math.max(0, w).toFixed(1)}" height="${String(row - 8)}" fill="${colour(p.name)}"><title>${p.name}: ${format(p.value)}</title></rect>`
      x += w
      return rect
    })
    const total = b.parts.reduce((s, p) => s + p.value, 0)
    return html`<text x="${String(labelW - 6)}" y="${String(y + row - 8)}" text-anchor="end">${clipLabel(b.label)}</text>${rects}<text x="${(x + 4).toFixed(1)}" y="${String(y + row - 8)}">${format(total)}</text>`
  })
  // Each legend entry as wide as its name (about 6.5 px a character at 11 px).
  const at = names.map((_, i) => labelW + names.slice(0, i).reduce((x, n) => x + 24 + Math.ceil(n.length * 6.5), 0))
  const keys =
    names.length > 1
      ? names.map(
          (name, i) =>
            html`<rect x="${String(at[i])}" y="4" width="10" height="10" fill="${colour(name)}"></rect><text x="${String((at[i] as number) + 14)}" y="13">${name}</text>`,
        )
      : []
  return html`<svg role="img" aria-label="${title}" viewBox="0 0 ${String(labelW + barW + 90)} ${String(height)}" width="100%" preserveAspectRatio="xMinYMin meet"><title>${title}</title>${keys}${rows}</svg>`
}

function clipLabel(label: string): string {
  return label.length > 20 ? `${label.slice(0, 19)}…` : label
}
