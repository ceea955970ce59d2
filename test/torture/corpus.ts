import { uuidN } from '../fixtures/tree.js'

/** One bad input: the arguments (with `{base}` for the tree), the exit code, and what the one line must say. */
export interface Case {
  name: string
  args: string[]
  code: number
  says: RegExp
  env?: Record<string, string>
}

export const TASK = uuidN(0x70)
const MISSING = uuidN(0x71)
/** Paused tasks with a trap planted in them (see plantTraps): links out of the task, a FIFO for a file. */
export const LINKED = uuidN(0x72)
export const FIFO_STATE = uuidN(0x73)
export const LINKED_STATE = uuidN(0x74)
export const DEVICE_STATE = uuidN(0x75)

const BAD_IDS: [string, string, RegExp][] = [
  ['empty', '', /no task id given|is not a task id/],
  ['a path', '../x', /is not a task id/],
  ['an absolute path', '/etc', /is not a task id/],
  ['a glob', '0000*', /is not a task id/],
  ['too short', '1234567', /too short/],
  ['not hex', 'gggggggg', /is not a task id/],
  ['5,000 characters', 'a'.repeat(5000), /\(5000 characters\)' is not a task id/],
  ['spaces inside', '0000 0070', /is not a task id/],
]

/** Commands that take a task id, with what else they need to get as far as the id. */
const ID_COMMANDS: [string, (id: string) => string[]][] = [
  ['view', (id) => ['view', id]],
  ['view --uuid', (id) => ['view', '--uuid', id]],
  ['compress', (id) => ['compress', id, '--extractive']],
  ['unlock', (id) => ['unlock', id]],
  ['pause', (id) => ['pause', id]],
  ['comment', (id) => ['comment', id, 'hello']],
  ['chat --send', (id) => ['chat', id, '--send', 'hi']],
  ['run --resume', (id) => ['run', '--resume', id]],
]

const BAD_DURATIONS = ['0', 'soon', '-5m', '1y', '5 m', '', '99999999999999999999d']
const DURATION_OPTIONS: [string, (d: string) => string[], RegExp][] = [
  ['watch-locks --interval', (d) => ['watch-locks', '--interval', d], /--interval/],
  ['cleanup --compress-after', (d) => ['cleanup', '--compress-after', d], /--compress-after/],
  ['cleanup --delete-after', (d) => ['cleanup', '--delete-after', d], /--delete-after/],
  ['pause --wait', (d) => ['pause', TASK, '--wait', d], /--wait/],
  ['run --timeout', (d) => ['run', '--task', 'x', '--timeout', d], /--timeout/],
  ['chat --timeout', (d) => ['chat', TASK, '--timeout', d], /--timeout/],
]

const BAD_DATES = ['2024-02-30', '1', '2024-13-01', 'tomorrow', '2 fortnights', '2024-1-1', '2024-01-01T25:00:00Z']
const BAD_COUNTS = ['0', '-1', '1.5', 'abc', '']
const COUNT_OPTIONS: [string, (n: string) => string[], RegExp][] = [
  ['view --limit', (n) => ['view', TASK, '--messages', '--limit', n], /--limit/],
  ['run --max-turns', (n) => ['run', '--task', 'x', '--max-turns', n], /--max-turns/],
  ['run --max-tokens', (n) => ['run', '--task', 'x', '--max-tokens', n], /--max-tokens/],
  ['compress --keep-recent', (n) => ['compress', TASK, '--keep-recent', n], /--keep-recent/],
]

/** Config files, each wrong in one way; written under the tree as `<name>.yaml`. */
export const BAD_CONFIGS: [string, string, RegExp][] = [
  ['not-yaml', 'llm: [unclosed', /is not valid YAML/],
  ['unknown-key', 'colour: blue\n', /colour is not a known setting/],
  ['nested-unknown', 'llm:\n  openai:\n    modle: x\n', /llm\.openai\.modle is not a known setting/],
  ['negative-context', 'llm:\n  openai:\n    context_length: -5\n', /context_length must be a positive integer/],
  ['ratio-over-1', 'context:\n  compression:\n    threshold: 1.5\n', /threshold must be a number greater than 0 and at most 1/],
  ['bad-provider', 'llm:\n  provider: claude\n', /llm\.provider must be/],
  ['heartbeat-too-slow', 'locks:\n  heartbeat_seconds: 120\n', /heartbeat_seconds \(120\) must be less than/],
  ['empty-base', 'context:\n  base_dir: ""\n', /base_dir must not be empty/],
  ['url', 'llm:\n  ollama:\n    base_url: localhost:11434\n', /llm\.ollama\.base_url must be an http\(s\) URL/],
  ['bad-timeout', 'run:\n  timeout: soon\n', /run\.timeout must be a duration/],
  ['shell-not-bool', 'tools:\n  shell: maybe\n', /tools\.shell must be true or false/],
  ['command-timeout', 'tools:\n  command_timeout_seconds: 6000\n', /command_timeout_seconds must be a whole number of seconds from 1 to 600/],
  ['user-unknown-key', 'users:\n  alice:\n    colour: blue\n', /users\.alice\.colour is not a known setting/],
  ['mcp-no-command', 'mcp:\n  servers:\n    x:\n      args: []\n', /mcp\.servers\.x\.command/],
  ['not-a-mapping', '- a\n- b\n', /must be a mapping/],
  ['unknown-tag', 'context:\n  durability: !!js/function "x"\n', /context\.durability has the unknown tag !!js\/function/],
  ['users-a-list', 'users: [alice]\n', /users must be a mapping of user names to settings/],
  ['url-scheme', 'github:\n  api_url: "javascript:alert(1)"\n', /github\.api_url must be an http\(s\) URL/],
  ['empty-server-name', 'mcp:\n  servers:\n    "":\n      command: x\n', /mcp\.servers has a server name that is empty/],
  [
    'gzip-after-delete',
    'context:\n  retention:\n    compress_after_days: 30\n    delete_after_days: 7\n',
    /compress_after_days \(30\) must be less than .*delete_after_days \(7\)/,
  ],
]

export function corpus(): Case[] {
  const cases: Case[] = []
  for (const [command, args] of ID_COMMANDS) {
    for (const [what, id, says] of BAD_IDS) cases.push({ name: `${command}: id ${what}`, args: args(id), code: 2, says })
    cases.push({ name: `${command}: a task that does not exist`, args: args(MISSING), code: 3, says: /no task/ })
  }
  for (const [option, args, says] of DURATION_OPTIONS) {
    // cleanup's ages may be 0 ("all of them, now"); every other duration must be more than 0.
    for (const d of BAD_DURATIONS.filter((d) => !(d === '0' && option.startsWith('cleanup'))))
      cases.push({ name: `${option} '${d}'`, args: args(d), code: 2, says })
  }
  for (const flag of ['--from', '--to'])
    for (const d of BAD_DATES) cases.push({ name: `stats ${flag} '${d}'`, args: ['stats', flag, d], code: 2, says: /is not a date|--from|--to/ })
  for (const [option, args, says] of COUNT_OPTIONS) for (const n of BAD_COUNTS) cases.push({ name: `${option} '${n}'`, args: args(n), code: 2, says })
  for (const [name, , says] of BAD_CONFIGS) {
    for (const command of [['stats'], ['view', TASK], ['run', '--task', 'x']])
      cases.push({ name: `config ${name}: ${command[0]}`, args: [...command, '--config', `{base}/${name}.yaml`], code: 2, says })
  }
  for (const command of ['view', 'stats', 'cleanup', 'compress', 'watch-locks', 'unlock', 'reindex', 'config', 'run', 'pause', 'comment', 'chat', 'demo']) {
    cases.push({ name: `${command}: an unknown flag`, args: [command, '--no-such-flag'], code: 2, says: /unknown option '--no-such-flag'/ })
  }
  cases.push(
    { name: 'a misspelt command', args: ['stast'], code: 2, says: /unknown command 'stast'.*Did you mean stats\?/ },
    { name: '--home is a file', args: ['stats', '--home', '{base}/file.txt'], code: 2, says: /is not a directory/ },
    { name: '--home is empty', args: ['stats', '--home', ''], code: 2, says: /--home is empty/ },
    { name: '--config /dev/zero', args: ['stats', '--config', '/dev/zero'], code: 2, says: /not a regular file/ },
    { name: '--config missing', args: ['stats', '--config', '{base}/none.yaml'], code: 2, says: /cannot read config \(no such file\)/ },
    { name: 'reindex of a missing tree', args: ['reindex', '--home', '{base}/missing'], code: 3, says: /there is no task tree/ },
    { name: 'stats --status unknown', args: ['stats', '--status', 'exploded'], code: 2, says: /--status/ },
    { name: 'view two ids', args: ['view', TASK, '--uuid', MISSING], code: 2, says: /two different task ids/ },
    { name: 'view --role unknown', args: ['view', TASK, '--role', 'robot'], code: 2, says: /--role/ },
    { name: 'cleanup --schedule not cron', args: ['cleanup', '--schedule', 'every day'], code: 2, says: /schedule|cron/ },
    {
      name: 'cleanup --schedule with a backward range',
      args: ['cleanup', '--schedule', '5-1 * * * *'],
      code: 2,
      says: /--schedule: '5-1 \* \* \* \*' is not a cron expression/,
    },
    { name: 'run: nothing to do', args: ['run'], code: 2, says: /no task given/ },
    { name: 'run: two sources', args: ['run', '--task', 'a', '--github', 'a/b#1'], code: 2, says: /exclude each other/ },
    { name: 'run: bad github ref', args: ['run', '--github', 'acme/shop'], code: 2, says: /is not owner\/repo#N/ },
    { name: 'run: bad gitlab ref', args: ['run', '--gitlab', 'shop#1'], code: 2, says: /is not group\/project#N/ },
    { name: 'run: missing workspace', args: ['run', '--task', 'x', '--workspace', '{base}/nowhere'], code: 2, says: /does not exist/ },
    { name: 'run: workspace is a file', args: ['run', '--task', 'x', '--workspace', '{base}/file.txt'], code: 2, says: /is not a directory/ },
    { name: 'run: empty task', args: ['run', '--task', ' '], code: 2, says: /the task is empty/ },
    { name: 'run: missing task file', args: ['run', '--task-file', '{base}/none.md'], code: 2, says: /cannot be read/ },
    { name: 'run: replay without recording', args: ['run', '--task', 'x', '--provider', 'replay'], code: 2, says: /needs a recording/ },
    { name: 'run: --task-id in a resume', args: ['run', '--resume', TASK, '--task-id', 'x'], code: 2, says: /--task-id names a new task/ },
    { name: 'chat: --send and --end', args: ['chat', TASK, '--send', 'x', '--end'], code: 2, says: /exclude each other/ },
    { name: 'chat: not a chat task', args: ['chat', TASK, '--send', 'x'], code: 4, says: /is not a chat task/ },
    { name: 'comment: too long', args: ['comment', TASK, 'x'.repeat(100_001)], code: 2, says: /keep it under/ },
    // Files the operator names: a FIFO must not hang the command, a file that is not a recording is not played.
    { name: 'run: task file is a FIFO', args: ['run', '--task-file', '{base}/fifo'], code: 2, says: /task file .*fifo is not a regular file/ },
    {
      name: 'run: system prompt file is a FIFO',
      args: ['run', '--task', 'x', '--system-prompt-file', '{base}/fifo'],
      code: 2,
      says: /system prompt file .*fifo is not a regular file/,
    },
    {
      name: 'run: system prompt file is a directory',
      args: ['run', '--task', 'x', '--system-prompt-file', '{base}/configs'],
      code: 2,
      says: /system prompt file .*configs is not a regular file/,
    },
    {
      name: 'run: recording is a FIFO',
      args: ['run', '--task', 'x', '--provider', 'replay', '--replay-from', '{base}/fifo'],
      code: 2,
      says: /--replay-from .*fifo is not a regular file/,
    },
    {
      name: 'run: recording has no assistant message',
      args: ['run', '--task', 'x', '--provider', 'replay', '--replay-from', '{base}/file.txt'],
      code: 2,
      says: /has no assistant messages to play/,
    },
    {
      name: 'run: --replay-from with another provider',
      args: ['run', '--task', 'x', '--provider', 'openai', '--replay-from', TASK],
      code: 2,
      says: /--replay-from plays a recording, but the provider is openai/,
    },
    { name: 'run: empty --workspace', args: ['run', '--task', 'x', '--workspace', ''], code: 2, says: /--workspace is empty/ },
    { name: 'run: empty --model', args: ['run', '--task', 'x', '--model', ' '], code: 2, says: /--model is empty/ },
    { name: 'watch-locks --interval past a timer', args: ['watch-locks', '--interval', '30d'], code: 2, says: /--interval.*at most 24d/ },
    // Links and FIFOs planted in a task: never followed, never opened blocking, the task left as it was.
    { name: 'view: state.json is a FIFO', args: ['view', FIFO_STATE], code: 1, says: /state\.json is not a regular file/ },
    { name: 'view: state.json links out', args: ['view', LINKED_STATE], code: 1, says: /state\.json is a symbolic link/ },
    { name: 'view: state.json is a device that never ends', args: ['view', DEVICE_STATE], code: 1, says: /state\.json is not a regular file/ },
    {
      name: 'run --resume: state.json is a device that never ends',
      args: ['run', '--resume', DEVICE_STATE, '--provider', 'replay', '--replay-from', TASK],
      code: 1,
      says: /state\.json is not a regular file/,
    },
    { name: 'compress: state.json is a FIFO', args: ['compress', FIFO_STATE, '--extractive'], code: 1, says: /state\.json is not a regular file/ },
    { name: 'comment: inbox.jsonl links out', args: ['comment', LINKED, 'hello'], code: 1, says: /inbox\.jsonl is a symbolic link/ },
    {
      name: 'run --resume: messages.jsonl links out',
      args: ['run', '--resume', LINKED, '--provider', 'replay', '--replay-from', TASK],
      code: 1,
      says: /messages\.jsonl is a symbolic link/,
    },
  )
  return cases
}
