import { expect } from 'vitest'
import type { Page } from 'playwright-core'

/**
 * What every report page must be at a phone's width and a laptop's (docs/serve.md#the-page):
 * its charts shown, in the window and readable (11 px text not shrunk below 10 px, no text
 * past its chart's edge, no two texts of a line on each other), and nothing wider than
 * its box: no card, table, cell or the page itself scrolling sideways.
 */
export async function expectFits(page: Page, name: string): Promise<void> {
  const charts = await page.evaluate(`[...document.querySelectorAll('main svg')].map((svg) => {
    const box = svg.getBoundingClientRect()
    const view = svg.viewBox.baseVal
    const scale = box.width / view.width
    const texts = [...svg.querySelectorAll('text')].map((t) => ({ text: t.textContent, r: t.getBoundingClientRect() }))
    const outside = texts.filter((t) => t.r.left < box.left - 1 || t.r.right > box.right + 1).map((t) => t.text)
    const overlapping = []
    for (const a of texts) for (const b of texts)
      if (a !== b && a.r.left < b.r.left && Math.abs(a.r.top - b.r.top) < 2 && a.r.right > b.r.left + 1) overlapping.push(a.text + ' | ' + b.text)
    return { width: box.width, height: box.height, right: box.right, px: 11 * scale, outside, overlapping, visible: getComputedStyle(svg).visibility === 'visible' }
  })`)
  expect(Array.isArray(charts) && charts.length, `${name}: charts`).toBeGreaterThan(0)
  for (const c of charts as { width: number; height: number; right: number; px: number; outside: string[]; overlapping: string[]; visible: boolean }[]) {
    expect(c.visible && c.width > 100 && c.height > 20, `${name}: a chart is shown`).toBe(true)
    expect(c.right, `${name}: the chart inside the window`).toBeLessThanOrEqual(await page.evaluate('window.innerWidth'))
    expect(c.px, `${name}: chart text of ${c.px.toFixed(1)} px`).toBeGreaterThanOrEqual(10)
    expect(c.outside, `${name}: chart text past the edge`).toEqual([])
    expect(c.overlapping, `${name}: chart texts on each other`).toEqual([])
  }
  const wide = await page.evaluate(
    `[...document.querySelectorAll('main section.card, main .scroll, main table, main td, main th, main dd, main p')].filter((e) => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1).map((e) => e.tagName + '.' + e.className + ': ' + (e.textContent || '').slice(0, 40))`,
  )
  expect(wide, `${name}: wider than its box`).toEqual([])
  expect(await page.evaluate('document.documentElement.scrollWidth - window.innerWidth'), `${name}: the page scrolls sideways`).toBeLessThanOrEqual(0)
}
