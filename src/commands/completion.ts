import { Argument, Command } from 'commander'
import type { Option } from 'commander'
import { firstArgumentWords } from '../command-kit/completion-words.js'

const SHELLS = ['bash', 'zsh', 'fish'] as const
type Shell = (typeof SHELLS)[number]

interface Spec {
  name: string
  aliases: string[]
  description: string
  options: { flag: string; description: string; choices: readonly string[]; value: boolean }[]
  /** Its first argument is a task uuid: completed from the tree (`list --all --json`), and `last`. */
  takesUuid: boolean
  /** Its subcommands (`jobs show`, `fleet init`), offered as its first argument. */
  subcommands: string[]
}

/** Options whose value is a task uuid. */
const UUID_OPTIONS = ['--resume', '--uuid']

export function completionCommand(): Command {
  return (
    new Command('completion')
      .description('print a shell completion script for bash, zsh or fish')
      .addArgument(new Argument('<shell>', 'the shell').choices([...SHELLS]))
      .addHelpText(
        'after',
        `
Examples:
  $ source <(ctxagent completion bash)                          in ~/.bashrc
  $ ctxagent completion zsh > "\${fpath[1]}/_ctxagent"           then restart zsh
  $ ctxagent completion fish > ~/.config/fish/completions/ctxagent.fish`,
      )
      // No config is read: a completion script must come out even where the config is broken.
      .action((shell: Shell, _opts: unknown, command: Command) => {
        const program = command.parent as Command
        const specs = program.commands.map(specOf)
        const globals = program.options
          .filter((o) => !o.hidden)
          .map(optionSpec)
          .filter((o) => o.flag !== '--version')
        process.stdout.write(shell === 'bash' ? bash(specs, globals) : shell === 'zsh' ? zsh(specs, globals) : fish(specs, globals))
      })
  )
}

function specOf(command: Command): Spec {
  const options = command.options.filter((o) => !o.hidden).map(optionSpec)
  return {
    name: command.name(),
    aliases: command.aliases(),
    description: command.description(),
    options,
    takesUuid: /uuid/.test(command.registeredArguments[0]?.name() ?? ''),
    subcommands: [...command.commands.map((c) => c.name()), ...firstArgumentWords(command)],
  }
}

function optionSpec(option: Option): Spec['options'][number] {
  return {
    flag: option.long ?? option.short ?? '',
    description: option.description,
    choices: option.argChoices ?? [],
    value: option.required || option.optional,
  }
}

/** Text inside single quotes, for every shell here: ' becomes '\'' (bash, zsh) or \' (fish). Descriptions are cut to `max`, word lists never. */
function quoted(text: string, shell: Shell, max = Number.POSITIVE_INFINITY): string {
  const oneLine = text.replace(/\s+/g, ' ').slice(0, max)
  return shell === 'fish' ? `'${oneLine.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'` : `'${oneLine.replace(/'/g, "'\\''")}'`
}

/** The names (and aliases) of the commands whose argument is a task uuid, as a shell case pattern. */
function uuidCommands(specs: Spec[]): string {
  return specs
    .filter((s) => s.takesUuid)
    .flatMap((s) => [s.name, ...s.aliases])
    .join('|')
}

function bash(specs: Spec[], globals: Spec['options']): string {
  const names = specs.flatMap((s) => [s.name, ...s.aliases])
  const cases = specs.map((s) => {
    const choices = s.options
      .filter((o) => o.choices.length > 0)
      .map((o) => `      ${o.flag}) COMPREPLY=( $(compgen -W ${quoted(o.choices.join(' '), 'bash')} -- "$cur") ); return ;;`)
    return [
      `    ${[s.name, ...s.aliases].join('|')})`,
      choices.length ? `      case "$prev" in\n${choices.join('\n')}\n      esac` : '',
      `      opts=${quoted([...s.subcommands, ...s.options.map((o) => o.flag), '--help'].join(' '), 'bash')} ;;`,
    ]
      .filter(Boolean)
      .join('\n')
  })
  return `# ctxagent completion for bash: source <(ctxagent completion bash)
_ctxagent() {
  local cur prev cmd i opts tree
  cur="\${COMP_WORDS[COMP_CWORD]}"
  prev="\${COMP_WORDS[COMP_CWORD-1]}"
  cmd=""
  tree=()
  for ((i = 1; i < COMP_CWORD; i++)); do
    case "\${COMP_WORDS[i]}" in
      --home|--config) tree+=("\${COMP_WORDS[i]}" "\${COMP_WORDS[i+1]}"); ((i++)) ;;
      -*) ;;
      *) cmd="\${COMP_WORDS[i]}"; break ;;
    esac
  done
  case "$prev" in
    --home|--config|--workspace|--task-file|--system-prompt-file|--replay-from) COMPREPLY=( $(compgen -f -- "$cur") ); return ;;
    ${UUID_OPTIONS.join('|')}) COMPREPLY=( $(compgen -W "$(_ctxagent_uuids "\${tree[@]}")" -- "$cur") ); return ;;
  esac
  if [ -z "$cmd" ]; then
    COMPREPLY=( $(compgen -W ${quoted([...names, ...globals.map((o) => o.flag), '--help', '--version'].join(' '), 'bash')} -- "$cur") )
    return
  fi
  opts=""
  case "$cmd" in
${cases.join('\n')}
  esac
  case "$cur" in
    -*) ;;
    *) case "$cmd" in ${uuidCommands(specs) || '-'}) opts="$opts $(_ctxagent_uuids "\${tree[@]}")" ;; esac ;;
  esac
  COMPREPLY=( $(compgen -W "$opts" -- "$cur") )
}
# last, then the task uuids of the tree (--home/--config as on the command line), newest first.
_ctxagent_uuids() {
  echo last
  ctxagent "$@" list --all --json 2>/dev/null | grep -o '"uuid":"[0-9a-f-]*"' | cut -d'"' -f4
}
complete -o default -F _ctxagent ctxagent
`
}

function zsh(specs: Spec[], globals: Spec['options']): string {
  const commands = specs.flatMap((s) => [s.name, ...s.aliases].map((n) => `    ${quoted(`${n.replace(/:/g, '\\:')}:${s.description}`, 'zsh', 100)}`))
  const value = (o: Spec['options'][number]) =>
    o.choices.length ? `:value:(${o.choices.join(' ')})` : UUID_OPTIONS.includes(o.flag) ? ':task:_ctxagent_uuids' : o.value ? ':value:_files' : ''
  const cases = specs.map(
    (s) =>
      `    ${[s.name, ...s.aliases].join('|')})\n      _arguments -s ${[...s.options, ...globals].map((o) => quoted(`${o.flag}[${o.description.replace(/[[\]:]/g, ' ')}]${value(o)}`, 'zsh')).join(' ')} ${s.subcommands.length > 0 ? quoted(`1:subcommand:(${s.subcommands.join(' ')})`, 'zsh') : s.takesUuid ? "'1:task:_ctxagent_uuids' '*:file:_files'" : "'*:file:_files'"} ;;`,
  )
  return `#compdef ctxagent
# ctxagent completion for zsh: ctxagent completion zsh > "\${fpath[1]}/_ctxagent" (or source <(ctxagent completion zsh))
_ctxagent_uuids() {
  local -a ids
  ids=(last \${(f)"$(ctxagent list --all --json 2>/dev/null | grep -o '"uuid":"[0-9a-f-]*"' | cut -d'"' -f4)"})
  compadd -a ids
}
_ctxagent() {
  local -a commands
  commands=(
${commands.join('\n')}
  )
  local i=2 cmd=""
  while (( i < CURRENT )); do
    case "$words[i]" in
      --home|--config) (( i += 2 )); continue ;;
      -*) ;;
      *) cmd="$words[i]"; break ;;
    esac
    (( i++ ))
  done
  if [[ -z "$cmd" ]]; then
    _describe 'command' commands
    return
  fi
  case "$cmd" in
${cases.join('\n')}
  esac
}
if [[ "\${funcstack[1]}" == "_ctxagent" ]]; then _ctxagent "$@"; else compdef _ctxagent ctxagent; fi
`
}

function fish(specs: Spec[], globals: Spec['options']): string {
  const lines = ['# ctxagent completion for fish: ctxagent completion fish > ~/.config/fish/completions/ctxagent.fish', 'complete -c ctxagent -f']
  for (const o of globals) lines.push(`complete -c ctxagent -n __fish_use_subcommand -l ${o.flag.replace(/^--/, '')} -d ${quoted(o.description, 'fish', 100)}`)
  const uuids = `(echo last; ctxagent list --all --json 2>/dev/null | string match -r -g '"uuid":"([0-9a-f-]+)"')`
  for (const s of specs) {
    for (const name of [s.name, ...s.aliases]) lines.push(`complete -c ctxagent -n __fish_use_subcommand -a ${name} -d ${quoted(s.description, 'fish', 100)}`)
    const seen = `'__fish_seen_subcommand_from ${[s.name, ...s.aliases].join(' ')}'`
    if (s.takesUuid) lines.push(`complete -c ctxagent -n ${seen} -a ${quoted(uuids, 'fish')}`)
    if (s.subcommands.length > 0) lines.push(`complete -c ctxagent -n ${seen} -a ${quoted(s.subcommands.join(' '), 'fish')}`)
    for (const o of s.options) {
      const choices = o.choices.length
        ? ` -x -a ${quoted(o.choices.join(' '), 'fish')}`
        : UUID_OPTIONS.includes(o.flag)
          ? ` -x -a ${quoted(uuids, 'fish')}`
          : o.value
            ? ' -r -F'
            : ''
      lines.push(`complete -c ctxagent -n ${seen} -l ${o.flag.replace(/^--/, '')}${choices} -d ${quoted(o.description, 'fish', 100)}`)
    }
  }
  return `${lines.join('\n')}\n`
}
