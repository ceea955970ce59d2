import Table from 'cli-table3'
import type { Io } from './io.js'

/** A cli-table3 table; coloured headings only when the Io allows colour. */
export function table(io: Io, head: string[], rows: (string | number)[][]): string {
  const t = new Table({
    head: head.map((h) => io.chalk.bold(h)),
    // No rule between rows: long listings stay readable.
    chars: { mid: '', 'left-mid': '', 'mid-mid': '', 'right-mid': '' },
    style: { head: io.color ? ['cyan'] : [], border: io.color ? ['grey'] : [] },
  })
  for (const row of rows) t.push(row.map(String))
  return t.toString()
}
