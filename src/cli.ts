import { Command, CommanderError, Option } from 'commander'
import { commandWord } from './command-word.js'
import { examplesText } from './commands/examples.js'
import { CtxError } from './errors.js'
import { forTerminal } from './terminal-text.js'
import { ctxagentVersion } from './version.js'

/**
 * The commands, in the order --help lists them, each loaded only when it runs: a command's
 * module brings what it uses (SQLite, PostgreSQL, the LLM clients, the forges), and
 * `ctxagent list` should not compile what `ctxagent worker` needs (BENCHMARKS.md, start-list).
 * `all`: a command that reads the others (completion lists them all).
 */
const COMMANDS: readonly { names: readonly string[]; all?: true; load: () => Promise<Command> }[] = [
  { names: ['run'], load: async () => (await import('./commands/run/run.js')).runCommand() },
  { names: ['view'], load: async () => (await import('./commands/view/index.js')).viewCommand() },
  { names: ['list', 'ls'], load: async () => (await import('./commands/list.js')).listCommand() },
  { names: ['stats'], load: async () => (await import('./commands/stats/stats.js')).statsCommand() },
  { names: ['cleanup'], load: async () => (await import('./commands/cleanup.js')).cleanupCommand() },
  { names: ['compress'], load: async () => (await import('./commands/compress.js')).compressCommand() },
  { names: ['pause'], load: async () => (await import('./commands/pause.js')).pauseCommand() },
  { names: ['comment'], load: async () => (await import('./commands/comment.js')).commentCommand() },
  { names: ['chat'], load: async () => (await import('./commands/chat.js')).chatCommand() },
  { names: ['watch-locks'], load: async () => (await import('./commands/watch-locks.js')).watchLocksCommand() },
  { names: ['unlock'], load: async () => (await import('./commands/unlock.js')).unlockCommand() },
  { names: ['reindex'], load: async () => (await import('./commands/reindex.js')).reindexCommand() },
  { names: ['config'], load: async () => (await import('./commands/config.js')).configCommand() },
  { names: ['doctor'], load: async () => (await import('./commands/doctor.js')).doctorCommand() },
  { names: ['demo'], load: async () => (await import('./commands/demo.js')).demoCommand() },
  { names: ['export'], load: async () => (await import('./commands/export.js')).exportCommand() },
  { names: ['eval'], load: async () => (await import('./commands/eval/index.js')).evalCommand() },
  { names: ['env'], load: async () => (await import('./commands/env.js')).envCommand() },
  { names: ['completion'], all: true, load: async () => (await import('./commands/completion.js')).completionCommand() },
  { names: ['enqueue'], load: async () => (await import('./commands/enqueue.js')).enqueueCommand() },
  { names: ['worker'], load: async () => (await import('./commands/worker.js')).workerCommand(main, buildProgram) },
  { names: ['poll'], load: async () => (await import('./commands/poll.js')).pollCommand() },
  { names: ['fleet'], load: async () => (await import('./commands/fleet/fleet.js')).fleetCommand() },
  { names: ['jobs'], load: async () => (await import('./commands/jobs.js')).jobsCommand() },
  { names: ['serve'], load: async () => (await import('./commands/serve.js')).serveCommand() },
]

/**
 * The commands `argv` needs: the one it names; none for `--version` alone; every one when it
 * names none or one of no known name (the help, commander's "did you mean", `help <command>`),
 * so that commander sees the program it would have seen with all of them.
 */
export function commandsFor(argv: readonly string[]): typeof COMMANDS {
  const word = commandWord(argv)
  if (word !== null) {
    const named = COMMANDS.find((c) => c.names.includes(word))
    return named !== undefined && named.all !== true ? [named] : COMMANDS
  }
  const words = argv.slice(2)
  return words.includes('--version') || words.includes('-V') ? [] : COMMANDS
}

export async function buildProgram(argv: readonly string[]): Promise<Command> {
  const program = new Command('ctxagent')
    .description(
      'A coding agent for the command line whose every task lives on disk, and the operator commands to inspect, measure, clean up and recover those tasks',
    )
    .version(ctxagentVersion(), '-V, --version')
    .addOption(
      new Option(
        '--home <dir>',
        'base directory of the task tree (default: CTXAGENT_HOME, config context.base_dir, $XDG_STATE_HOME/ctxagent or ~/.local/state/ctxagent)',
      ),
    )
    .addOption(
      new Option(
        '--config <file>',
        'config file, or none for no file (default: CTXAGENT_CONFIG, $XDG_CONFIG_HOME/ctxagent/config.yaml or ~/.config/ctxagent/config.yaml, /etc/ctxagent/config.yaml; never one in the current directory)',
      ),
    )
    .option('--json', 'machine-readable output (one JSON document, or JSON Lines for listings)')
    .option('--no-color', 'no colour (also NO_COLOR)')
    .showSuggestionAfterError(true)

  for (const command of await Promise.all(commandsFor(argv).map((c) => c.load()))) program.addCommand(command)
  for (const command of [program, ...program.commands]) {
    const examples = examplesText(command.name())
    if (examples !== null) command.addHelpText('after', examples)
    // Every command's --help lists --home, --config, --json and --no-color too.
    command.configureHelp({ showGlobalOptions: true })
    command.exitOverride()
    // Commander's own error text is replaced by our one-line form in report().
    command.configureOutput({ outputError: () => undefined })
  }
  // Options but no command: commander would print the whole help to stderr; report() says it in one line.
  program.configureOutput({ outputError: () => undefined, writeErr: () => undefined })
  return program
}

/** Runs the CLI; the only place that decides the exit code. */
export async function main(argv: string[]): Promise<void> {
  // `ctxagent view … | head` closes stdout early: that is the reader's choice, not a failure.
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') process.exit(0)
    throw err
  })
  // Log lines to a reader that went away (an agent whose worker was SIGKILLed): lost, but the
  // task goes on and settles; dying of them would leave it in running/ for a reaper (docs/contract.md §14.3).
  process.stderr.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPIPE') throw err
  })
  const program = await buildProgram(argv)
  try {
    // No arguments at all: a newcomer's first try gets the help, on stdout, as success.
    if (argv.length <= 2) {
      program.outputHelp()
      return
    }
    await program.parseAsync(argv)
  } catch (err) {
    process.exitCode = report(err, program)
  }
}

/** The subcommand the command line named (`view `), so an error points to its own --help; '' when none. */
function commandIn(program: Command): string {
  for (const word of process.argv.slice(2)) {
    if (word.startsWith('-')) continue
    // The first word naming a command (a value of --home or --config before it is not one).
    const found = program.commands.find((c) => c.name() === word || c.aliases().includes(word))
    if (found) return `${found.name()} `
  }
  return ''
}

/**
 * The one error line, made safe for a terminal: an error may quote a server's reply, a
 * task's text or a file name, with escape sequences in it (docs/contract.md §8).
 */
function errorLine(text: string): void {
  process.stderr.write(`ctxagent: ${forTerminal(text)}\n`)
}

function report(err: unknown, program: Command): number {
  if (err instanceof CommanderError) {
    if (err.exitCode === 0) return 0
    // Help as an error: options without a command (`ctxagent --home X`), or `help <unknown>`.
    if (err.code === 'commander.help') {
      const [first, second] = program.args
      const message = first === 'help' && second !== undefined ? `unknown command '${second.slice(0, 40)}'` : 'no command given'
      errorLine(`${message} (run ctxagent --help for the list)`)
      return 2
    }
    // One line: commander puts "(Did you mean …?)" on a line of its own.
    const message = err.message
      .replace(/^error: /, '')
      .replace(/\s*\n\s*/g, ' ')
      .trim()
    errorLine(`${message} (see ctxagent ${commandIn(program)}--help)`)
    return 2
  }
  const debug = process.env.CTXAGENT_DEBUG === '1'
  if (err instanceof CtxError) {
    if (err.logged) return err.exitCode
    errorLine(`${err.message}${err.hint ? ` (${err.hint})` : ''}`)
    if (debug && err.stack) process.stderr.write(`${err.stack}\n`)
    return err.exitCode
  }
  const message = err instanceof Error ? err.message : String(err)
  errorLine(`${message} (${debug ? 'stack follows' : 'set CTXAGENT_DEBUG=1 for details'})`)
  if (debug && err instanceof Error && err.stack) process.stderr.write(`${err.stack}\n`)
  return 1
}
