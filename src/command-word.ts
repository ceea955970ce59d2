/** The global options that take a value: their value is not a command's name. */
const GLOBAL_VALUES = new Set(['--home', '--config'])

/**
 * The word of a command line that names its command: the first that is neither an option
 * nor the value of a global option that takes one (`--home list stats` names stats), before
 * any `--`; null when there is none. cli.ts loads the command it names, and start.ts picks
 * the build that holds it: one rule for both.
 */
export function commandWord(argv: readonly string[]): string | null {
  const words = argv.slice(2)
  for (let i = 0; i < words.length; i++) {
    const word = words[i] as string
    if (word === '--') return null
    if (GLOBAL_VALUES.has(word)) {
      i++
      continue
    }
    if (!word.startsWith('-')) return word
  }
  return null
}
