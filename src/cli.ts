import { Command, CommanderError, Option } from 'commander'
import { chatCommand } from './commands/chat.js'
import { cleanupCommand } from './commands/cleanup.js'
import { commentCommand } from './commands/comment.js'
import { completionCommand } from './commands/completion.js'
import { compressCommand } from './commands/compress.js'
import { configCommand } from './commands/config.js'
import { demoCommand } from './commands/demo.js'
import { enqueueCommand } from './commands/enqueue.js'
import { fleetCommand } from './commands/fleet/fleet.js'
import { jobsCommand } from './commands/jobs.js'
import { doctorCommand } from './commands/doctor.js'
import { exportCommand } from './commands/export.js'
import { listCommand } from './commands/list.js'
import { pauseCommand } from './commands/pause.js'
import { reindexCommand } from './commands/reindex.js'
import { runCommand } from './commands/run/run.js'
import { statsCommand } from './commands/stats.js'
import { unlockCommand } from './commands/unlock.js'
import { viewCommand } from './commands/view/index.js'
import { watchLocksCommand } from './commands/watch-locks.js'
import { workerCommand } from './commands/worker.js'
import { pollCommand } from './commands/poll.js'
import { serveCommand } from './commands/serve.js'
import { examplesText } from './commands/examples.js'
import { CtxError } from './errors.js'
import { forTerminal } from './terminal-text.js'
import { ctxagentVersion } from './version.js'

export function buildProgram(): Command {
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

  for (const command of [
    runCommand(),
    viewCommand(),
    listCommand(),
    statsCommand(),
    cleanupCommand(),
    compressCommand(),
    pauseCommand(),
    commentCommand(),
    chatCommand(),
    watchLocksCommand(),
    unlockCommand(),
    reindexCommand(),
    configCommand(),
    doctorCommand(),
    demoCommand(),
    exportCommand(),
    completionCommand(),
  ])
    program.addCommand(command)
  for (const command of [enqueueCommand(), workerCommand(main), pollCommand(), fleetCommand(), jobsCommand(), serveCommand()]) program.addCommand(command)
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
  const program = buildProgram()
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
