import { createRequire } from 'node:module'
import type Table from 'cli-table3'
import type { Io } from './io.js'

/**
 * cli-table3, with its colours and emoji tables 45 KB of what a command would compile at
 * start-up, is required the first time a table is drawn for a terminal: output to a pipe
 * or a file (scripts, `| grep`) and --json never draw one (docs/development.md#start-up).
 * It stays outside the bundle (scripts/bundle.mjs) and is read from node_modules.
 */
let tableClass: typeof Table | undefined
const TableClass = (): typeof Table => (tableClass ??= createRequire(import.meta.url)('cli-table3') as typeof Table)

/** The width of a terminal that does not say (a serial console, some CI terminals). */
const DEFAULT_COLUMNS = 80

/** Fewer columns than this and no table is readable; narrower terminals get this width. */
const MIN_COLUMNS = 20

/**
 * A table of rows, for a person or for a program, one helper for every command:
 * - stdout a terminal: a cli-table3 table that fits the terminal's width (80 when it
 *   does not say), never wrapped: the widest column is cut with an ellipsis until a row
 *   fits (an 8-character id stays whole as long as it can); coloured headings only when
 *   the Io allows colour.
 * - stdout not a terminal (a pipe, a file): plain tab-separated values, a header row
 *   then one row per item, no borders, no colour, no padding, so `cut -f`, `awk -F'\t'`
 *   and `sort` work; a field's own tabs and line breaks become spaces.
 * `--json` is the stable format; this is the human one.
 */
export function table(io: Io, head: string[], rows: (string | number)[][]): string {
  const cells = rows.map((row) => row.map((cell) => oneLine(String(cell))))
  if (!io.isTTY) return [head, ...cells].map((row) => row.map(plain).join('\t')).join('\n')
  return fitted(io, head.map(oneLine), cells, terminalColumns(io))
}

/** The terminal's width: what it says, 80 when it says nothing (0 or undefined), never under 20. */
function terminalColumns(io: Io): number {
  const columns = io.stdout.columns
  return Math.max(MIN_COLUMNS, Number.isInteger(columns) && columns > 0 ? columns : DEFAULT_COLUMNS)
}

/** A column keeps this much of its text (an id's 8 characters) before padding goes, and before it is cut further. */
const KEEP = 8

function fitted(io: Io, head: string[], rows: string[][], columns: number): string {
  // cli-table3 measures each column (display width, colour ignored) as it renders; that
  // measure, padding included, is where the fitting starts.
  const natural = render(io, head, rows, { padding: 1 })
  const content = natural.table.options.colWidths.map((w) => (typeof w === 'number' ? w : 2) - 2)
  if (lineWidth(content.map((w) => w + 2)) <= columns) return natural.text
  // The widest column is cut first, down to KEEP; then the padding goes; then any column is cut, down to one character.
  for (const [padding, keep] of [
    [1, KEEP],
    [0, KEEP],
    [0, 1],
  ] as const) {
    const fit = shrink(content, keep, columns - content.length * 2 * padding)
    if (fit !== null) return render(io, head, rows, { padding, colWidths: fit.map((w) => w + 2 * padding) }).text
  }
  // Too narrow for every column even one character wide: the first ones that fit.
  const shown = Math.max(1, Math.floor((columns - 1) / 2))
  const cut = (row: string[]) => row.slice(0, shown)
  return render(io, cut(head), rows.map(cut), { padding: 0, colWidths: Array<number>(shown).fill(1) }).text
}

/** Content widths that fit `columns`: the widest column loses a character at a time, none below min(its width, keep); null when they cannot. */
function shrink(natural: number[], keep: number, columns: number): number[] | null {
  const widths = [...natural]
  const floor = natural.map((w) => Math.min(w, keep))
  while (lineWidth(widths) > columns) {
    let widest = -1
    for (let i = 0; i < widths.length; i++) if ((widths[i] ?? 0) > (floor[i] ?? 0) && (widest < 0 || (widths[i] ?? 0) > (widths[widest] ?? 0))) widest = i
    if (widest < 0) return null
    widths[widest] = (widths[widest] ?? 0) - 1
  }
  return widths
}

/** A row's width on screen: each column's width plus one border before each and one at the end. */
function lineWidth(widths: number[]): number {
  return widths.reduce((sum, w) => sum + w + 1, 1)
}

function render(io: Io, head: string[], rows: string[][], layout: { padding: number; colWidths?: number[] }): { table: Table.Table; text: string } {
  const t = new (TableClass())({
    head: head.map((h) => io.chalk.bold(h)),
    // No rule between rows: long listings stay readable.
    chars: { mid: '', 'left-mid': '', 'mid-mid': '', 'right-mid': '' },
    style: { head: io.color ? ['cyan'] : [], border: io.color ? ['grey'] : [], 'padding-left': layout.padding, 'padding-right': layout.padding },
    ...(layout.colWidths ? { colWidths: layout.colWidths } : {}),
    wordWrap: false,
    truncate: '…',
  })
  for (const row of rows) t.push(row)
  return { table: t, text: t.toString() }
}

/** A cell on one line: cli-table3 would make a line break a second line of the row. */
function oneLine(text: string): string {
  return text.replace(/\r\n|[\t\n\r]/g, ' ')
}

/** A field of tab-separated output: no colour, nothing that would split it. */
function plain(text: string): string {
  return text.replace(/\x1b\[[0-9;]*m/g, '')
}
