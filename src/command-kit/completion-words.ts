import type { Command } from 'commander'

/**
 * Words a command's first argument takes, for completion only: commander would check
 * `.choices()` itself with a message of its own, and `jobs` says more (`jobs: unknown action`).
 */
const argumentWords = new WeakMap<Command, readonly string[]>()

/** Offers `words` as `command`'s first argument in the completion scripts. */
export function completesFirstArgument(command: Command, words: readonly string[]): Command {
  argumentWords.set(command, words)
  return command
}

/** The words completesFirstArgument gave `command` (none when it gave nothing). */
export function firstArgumentWords(command: Command): readonly string[] {
  return argumentWords.get(command) ?? []
}
