import { UNTRUSTED_TEXT_RULE } from '../llm/prompts.js'
import { readTextArg } from './settings.js'
import type { RunSettings } from './settings.js'

/** The system prompt of a coding task, unless --system-prompt-file gives another. */
export function defaultSystemPrompt(workspace: string, allowShell: boolean, chat = false): string {
  if (chat) {
    return `You are a helpful software engineer chatting with a developer about the workspace ${workspace}. Answer each message; use the tools to look at${allowShell ? ', run' : ''} and change the code when that helps, reading files before changing them. ${UNTRUSTED_TEXT_RULE} Keep answers short and concrete.`
  }
  return `You are a careful software engineer working as a coding agent in the workspace ${workspace}.

Work through the tools: read and search the code before changing it, make small exact edits, and check your work${allowShell ? ' (run the tests or the program with run_command)' : ''}. All paths are relative to the workspace; nothing outside it can be read or written.

Rules:
- read_file a file before edit_file or write_file changes it; edit_file needs old_string to match exactly once (or set replace_all).
- Do not repeat a call that gave the same result: change your approach instead.
- ${UNTRUSTED_TEXT_RULE}
- When the task is done, call finish with a short summary of what you changed and status "done"; if it cannot be done, call finish with status "blocked" and say why.`
}

/** The whole system prompt: the base, then each append (config run.system_prompt_append, users.<name>.system_prompt_append). */
export function systemPrompt(base: string, appends: readonly string[]): string {
  return [base.trimEnd(), ...appends.map((a) => a.trim()).filter((a) => a !== '')].join('\n\n')
}

/**
 * A new task's system prompt: the base (--system-prompt-file, else the built-in one), the operator's appends, and the
 * project's instructions last (docs/environments.md#project-instructions). The cost check at start sizes the first
 * request by it too (docs/running.md#budgets), before the instructions are read: null then.
 */
export function taskSystemPrompt(settings: RunSettings, instructions: string | null): string {
  const base = settings.systemPromptFile
    ? readTextArg(settings.systemPromptFile, 'system prompt file')
    : defaultSystemPrompt(settings.workspace, settings.allowShell, settings.chat)
  return systemPrompt(base, [...settings.systemPromptAppend, instructions ?? ''])
}
