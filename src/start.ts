import { commandWord } from './command-word.js'

/*
 * What bin/ctxagent loads first (bundle/start.js, built from this file by scripts/bundle.mjs):
 * it picks the build of the CLI that the command line needs. A command with a build of its
 * own (bundle/<name>/, a tree) loads from there; every other command line from bundle/.
 * A tree is the whole CLI built with that one command, so its chunks are cut for that
 * command alone: `run` loads about half as many modules as from the build of all of them
 * (docs/development.md#start-up). A process loads one build only, never a module of each.
 */

/** The commands with a tree, put here by scripts/bundle.mjs; none from dist/. */
declare const CTXAGENT_TREES: readonly string[] | undefined
const TREES: readonly string[] = typeof CTXAGENT_TREES === 'undefined' ? [] : CTXAGENT_TREES

/** The build of the CLI for `argv`, relative to this module: `./run/cli.js` or `./cli.js`. */
export function cliFor(argv: readonly string[], trees: readonly string[] = TREES): string {
  const word = commandWord(argv)
  return word !== null && trees.includes(word) ? `./${word}/cli.js` : './cli.js'
}

/** Loads the build `argv` needs and runs it. */
export async function start(argv: string[]): Promise<void> {
  // A path made at run time: the builds stay modules of their own, not bundled into this one.
  const cli = (await import(new URL(cliFor(argv), import.meta.url).href)) as { main: (argv: string[]) => Promise<void> }
  await cli.main(argv)
}
