import { describe, expect, it } from 'vitest'
import { buildProgram, commandsFor } from '../src/cli.js'
import { cliFor } from '../src/start.js'

const argv = (...words: string[]) => ['node', 'ctxagent', ...words]
const names = (words: string[]) => commandsFor(argv(...words)).map((c) => c.names[0])

describe('commandsFor: a command line loads only the command it names', () => {
  const all = commandsFor(argv()).map((c) => c.names[0])
  it.each([
    [['list'], ['list']],
    [['ls', '--json'], ['list']],
    [['--home', '/t', 'run', '--task', 'x'], ['run']],
    // A global option's value is not the command, even when it reads like one.
    [['--home', 'list', 'stats'], ['stats']],
    [['--config=/c.yaml', '--json', 'view', 'abc'], ['view']],
    [['--version'], []],
    [['-V'], []],
    // Completion lists every command; help, a typo's "did you mean" and no command at all see them all.
    [['completion', 'bash'], all],
    [['help', 'list'], all],
    [['lst'], all],
    [['--json'], all],
    [['--', 'list'], all],
    [[], all],
  ])('%j loads %j', (words, expected) => {
    expect(names(words)).toEqual(expected)
  })
})

describe('the command table', () => {
  it('names each command as the command names itself, aliases after, in the order of --help', async () => {
    const program = await buildProgram(argv('--help'))
    const table = commandsFor(argv()).map((c) => c.names)
    expect(program.commands.map((c) => [c.name(), ...c.aliases()])).toEqual(table)
  })

  it('gives a command line the same command as the whole program would', async () => {
    for (const words of [['ls'], ['--home', 'x', 'run'], ['worker', '--concurrency', '2']]) {
      const one = await buildProgram(argv(...words))
      expect(one.commands.map((c) => c.name())).toEqual(names(words))
    }
  })
})

describe('cliFor: the build a command line loads (src/start.ts)', () => {
  it.each([
    [['run', '--task', 'x'], './run/cli.js'],
    [['--home', '/t', '--json', 'run'], './run/cli.js'],
    // The value of --home or --config is not the command; nor is a word after `--`.
    [['--home', 'run', 'list'], './cli.js'],
    [['--config', 'run'], './cli.js'],
    [['--', 'run'], './cli.js'],
    [['list'], './cli.js'],
    [['--version'], './cli.js'],
    [[], './cli.js'],
  ])('%j loads %s', (words, expected) => {
    expect(cliFor(argv(...words), ['run'])).toBe(expected)
  })

  it('loads the build of every command when no tree was built (dist/)', () => {
    expect(cliFor(argv('run'))).toBe('./cli.js')
  })

  it('loads a tree only for a command line whose one command is its own', () => {
    for (const words of [['run'], ['--home', 'x', 'run', '--task', 'y'], ['--json', 'run', '--resume', 'u']]) {
      expect(cliFor(argv(...words), ['run'])).toBe('./run/cli.js')
      expect(names(words)).toEqual(['run'])
    }
  })
})
