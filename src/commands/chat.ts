import { createInterface } from 'node:readline'
import { Command, Option } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { auditTask } from '../command-env.js'
import { CtxError, UsageError } from '../errors.js'
import { askOwner } from '../run/control.js'
import { sendChatMessage, waitForReply } from '../run/chat-client.js'
import type { ReplyOutcome } from '../run/chat-client.js'
import { resolveTask } from '../storage/fs/layout.js'
import type { TaskRef } from '../storage/fs/layout.js'
import { readMetadata } from '../storage/task/metadata.js'
import { durationArg, withEnv } from '../command-kit/shared.js'
import { forTerminal } from '../terminal-text.js'

interface ChatOptions {
  send?: string
  wait: boolean
  timeout?: number
  end?: boolean
}

/** The checked options: what chat does, and how long it waits. */
interface ChatPlan {
  send?: string
  wait: boolean
  timeout: number
  end?: boolean
}

const DEFAULT_TIMEOUT_MS = 300_000

export function chatCommand(): Command {
  return (
    new Command('chat')
      .description('talk to a chat task (run --chat): attach interactively, --send one message and print the reply, or --end the session')
      .argument('<uuid>', 'task uuid, a unique prefix of 8+ hex characters, or last (the newest task)')
      .option('--send <text>', 'send one message, wait for its reply and print it')
      .option('--no-wait', 'with --send: return once the message is queued (a paused session answers it after resume)')
      // No commander default: an explicit --timeout must be told apart from none (it contradicts --no-wait).
      .addOption(new Option('--timeout <duration>', 'how long to wait for a reply, or for --end (default: 5m)').argParser(durationArg('--timeout')))
      .option('--end', 'end the session (idempotent; succeeds when there is none)')
      .action(withEnv(chat))
  )
}

/**
 * Every flag combination is checked here, before the task is looked up or anything is
 * written: a contradiction is a usage error, never a conflict found on the way.
 */
function checkOptions(opts: ChatOptions): ChatPlan {
  if (opts.send !== undefined && opts.end) throw new UsageError('--send and --end exclude each other', 'give one of them')
  if (!opts.wait && opts.send === undefined) throw new UsageError('--no-wait applies only to --send', 'add --send TEXT to queue a message, or drop --no-wait')
  if (!opts.wait && opts.timeout !== undefined)
    throw new UsageError('--timeout and --no-wait exclude each other', 'drop --timeout: with --no-wait nothing is waited for')
  if (opts.send !== undefined && opts.send.trim() === '') throw new UsageError('the message is empty', 'say something')
  return { ...opts, timeout: opts.timeout ?? DEFAULT_TIMEOUT_MS }
}

async function chat(ctx: CommandEnv, received: ChatOptions, id: string): Promise<void> {
  const opts = checkOptions(received)
  const ref = resolveTask(ctx.layout, id)
  if (readMetadata(ref.dir).run?.chat !== true)
    throw new CtxError(`task ${ref.uuid} is not a chat task`, {
      exitCode: 4,
      hint: 'start one with ctxagent run --chat; talk to other tasks with ctxagent comment',
    })
  // Audited only once the command acts: a refusal reads and changes nothing.
  if (opts.end) {
    auditTask(ctx, 'chat', ref.uuid)
    return end(ctx, ref, opts)
  }
  if (ref.location === 'completed')
    throw new CtxError(`the chat session of task ${ref.uuid} has ended`, { exitCode: 4, hint: 'start a new one with ctxagent run --chat' })
  if (opts.send !== undefined) return sendOne(ctx, ref, opts.send, opts)
  if (ref.location !== 'running')
    throw new CtxError(`task ${ref.uuid} is paused`, {
      exitCode: 4,
      hint: `resume it with ctxagent run --resume ${ref.uuid.slice(0, 8)}, or queue a message with --send TEXT --no-wait`,
    })
  auditTask(ctx, 'chat', ref.uuid)
  return attach(ctx, ref, opts)
}

async function sendOne(ctx: CommandEnv, ref: TaskRef, text: string, opts: ChatPlan): Promise<void> {
  if (ref.location !== 'running' && opts.wait) {
    throw new CtxError(`task ${ref.uuid} is paused; no one would answer`, { exitCode: 4, hint: 'add --no-wait to queue the message for after the resume' })
  }
  // Sent first: a message the inbox refuses (over 1 MiB) changes nothing, the audit log included.
  const { record, from } = sendChatMessage(ref.dir, ctx.osUser, text, ctx.now())
  auditTask(ctx, 'chat', ref.uuid)
  if (!opts.wait) {
    if (ctx.json) ctx.io.json({ uuid: ref.uuid, queued: record })
    else ctx.io.out(`message ${record.id} queued for task ${ref.uuid}`)
    return
  }
  const outcome = await waitForReply(ctx.layout, ref.uuid, record.id, from, opts.timeout)
  if (outcome.kind === 'reply') {
    if (ctx.json) ctx.io.json(outcome.message)
    else ctx.io.out(forTerminal(outcome.message.content))
    return
  }
  throw noReply(ref, outcome, opts.timeout)
}

function noReply(ref: TaskRef, outcome: Exclude<ReplyOutcome, { kind: 'reply' }>, timeoutMs: number): CtxError {
  if (outcome.kind === 'timeout')
    return new CtxError(`no reply from task ${ref.uuid} within ${Math.round(timeoutMs / 1000)}s`, {
      hint: 'the message stays queued; its reply will be in ctxagent view --messages',
    })
  return new CtxError(`task ${ref.uuid} ${outcome.location === null ? 'is gone' : `moved to ${outcome.location}/`} before it answered`, {
    hint: 'a paused session answers after ctxagent run --resume',
  })
}

/** chat --end: asks the owner to end the session, and waits until the task is completed. */
async function end(ctx: CommandEnv, ref: TaskRef, opts: ChatPlan): Promise<void> {
  const say = (outcome: string, text: string) => (ctx.json ? ctx.io.json({ uuid: ref.uuid, outcome }) : ctx.io.out(text))
  if (ref.location === 'completed') return say('no_session', `task ${ref.uuid}: no session to end (it is finished)`)
  if (ref.location === 'paused') return say('no_session', `task ${ref.uuid}: no live session to end (it is paused; resume it, or leave it)`)
  const asked = await askOwner(ctx.layout, ref, 'end', ctx.osUser, opts.timeout, () => ctx.now())
  if (asked.location === 'completed') return say('ended', `task ${ref.uuid}: session ended`)
  throw new CtxError(`the agent of task ${ref.uuid} did not end the session within ${Math.round(opts.timeout / 1000)}s`, {
    hint: 'the request stays in its inbox; watch-locks ends sessions past chat.hard_timeout_minutes',
  })
}

/** Interactive: a line is a message; its reply is printed; Ctrl-D detaches and the session goes on. */
async function attach(ctx: CommandEnv, ref: TaskRef, opts: ChatPlan): Promise<void> {
  const rl = createInterface({ input: process.stdin, output: process.stdout, terminal: process.stdin.isTTY === true })
  const prompt = () => rl.setPrompt(ctx.io.chalk.bold('you> '))
  ctx.io.out(`attached to chat task ${ref.uuid}; type a message, Ctrl-D to detach (the session goes on)`)
  prompt()
  rl.prompt()
  for await (const line of rl) {
    if (line.trim() === '') {
      rl.prompt()
      continue
    }
    let sent: ReturnType<typeof sendChatMessage>
    try {
      sent = sendChatMessage(ref.dir, ctx.osUser, line, ctx.now())
    } catch (err) {
      // A line the inbox refuses (over 1 MiB) is said so, and the session goes on.
      if (!(err instanceof UsageError)) throw err
      ctx.io.warn(`${err.message} (${err.hint ?? 'send a shorter message'})`)
      rl.prompt()
      continue
    }
    const { record, from } = sent
    const outcome = await waitForReply(ctx.layout, ref.uuid, record.id, from, opts.timeout)
    if (outcome.kind !== 'reply') {
      rl.close()
      throw noReply(ref, outcome, opts.timeout)
    }
    ctx.io.out(`${ctx.io.chalk.cyan('agent>')} ${forTerminal(outcome.message.content)}`)
    rl.prompt()
  }
  ctx.io.out('detached; the session goes on')
}
