import { hostname } from 'node:os'
import { join } from 'node:path'
import { startTaskTrace } from '../telemetry/trace.js'
import { compressionLimit, settingsFrom } from '../context/compaction.js'
import { extractiveSummarizer, llmSummarizer } from '../context/summarizer.js'
import type { Config } from '../config/schema.js'
import type { LlmClient } from '../llm/client.js'
import { requireLlmClient } from '../llm/providers.js'
import { ReplayClient } from '../llm/replay.js'
import { appendInbox } from '../storage/task/inbox.js'
import type { TaskRef } from '../storage/fs/layout.js'
import type { TaskKey } from '../storage/task/metadata.js'
import { killedText } from '../operations/reaper.js'
import { createTask, resumeTask } from '../storage/task/lifecycle.js'
import type { TaskHandle } from '../storage/task/handle.js'
import type { TaskEnv } from '../storage/task/env.js'
import { ToolRegistry } from '../tools/registry.js'
import type { McpSandbox } from '../tools/sandbox/mcp-launch.js'
import { hiddenPaths, mcpSandbox, shellSandbox } from './sandbox-setup.js'
import { Agent } from './turn.js'
import { ChatLoop } from './chat.js'
import { RemoteLink, statusText } from './remote.js'
import type { Channel } from '../sources/types.js'
import type { Ending } from './ending.js'
import { findInheritance, inheritanceMessage, inheritanceOf } from './inheritance.js'
import type { Inheritance } from './inheritance.js'
import { createRunLog } from './log.js'
import type { RunLog } from './log.js'
import { defaultSystemPrompt, systemPrompt } from './prompt.js'
import { repairResumed } from './repair.js'
import type { RecordedFinish } from './repair.js'
import { readTextArg, runRecord } from './settings.js'
import type { RunSettings } from './settings.js'
import { StopController, stoppableClient } from './stop.js'
import { resumeRaceLost } from '../errors.js'
import { holdForTest } from '../test-pause.js'
import { FILES } from '../storage/fs/layout.js'
import { fileSize } from '../storage/task/reader.js'
import { networkFields } from '../tools/sandbox/egress-proxy.js'
import { deliverCompleted, deliveryRecord } from './delivery-step.js'
import { outcomeText } from './outcome.js'
import { recordError, settle } from './settle.js'
import type { Outcome } from './outcome.js'
import type { RunEnv, RunStart } from './run-start.js'
import { budgetLine, spendGuard } from './spend-setup.js'

/**
 * Runs one task to an ending: creates it (or resumes it), runs the agent loop, and
 * settles it (completed, timeout, failed, paused), or writes nothing more when its
 * lock was taken over. Returns the outcome; throws only for errors before the task exists.
 */
export async function runTask(run: RunEnv, start: RunStart): Promise<Outcome> {
  const { env, config, settings } = run
  // Before the task exists: a shell without a working sandbox is refused unless the operator opted out.
  const hidden = hiddenPaths(env.layout.base, run.configFile ?? null)
  const sandbox = shellSandbox(config, settings.allowShell, hidden, settings.workspace)
  // What delivery starts from, read (and a workspace it cannot work with refused) before the task exists.
  const delivering = start.kind === 'new' ? await deliveryRecord(settings) : {}
  const stop = new StopController()
  const begun = Date.now()
  const lostNow = () => stop.stop('lost')
  let inheritance: Inheritance | null = null
  if (start.kind === 'new' && settings.inherit) {
    inheritance = await findInheritance(env, keyColumns(start.source.key, start.user), start.source.key.task_source === 'local' ? settings.workspace : null)
    if (inheritance === null && start.source.opener !== undefined) inheritance = await inheritanceOf(env, start.source.opener)
  }
  // The handlers are in place before the task's directory is: a stop while it is created (or
  // taken from paused/) pauses it once it exists, instead of killing the process with a
  // half-made task in running/ (a worker stopped just as its agent began a job).
  let told: RunLog | null = null
  let created: string | null = null
  const pausing = (signal: 'SIGINT' | 'SIGTERM'): string =>
    `${signal}: pausing at once (the LLM request and running tools are stopped)${signal === 'SIGINT' ? '; Ctrl-C again to exit without pausing' : ''}`
  // A second Ctrl-C exits at once and leaves the task in running/: say how to take it back.
  const removeSignals = run.signals
    ? stop.handleSignals(
        () => {
          if (created !== null)
            told?.warn(
              `stopped at once; the task stays in running/ with its lock. Take it back with: ctxagent run --resume ${created} (or ctxagent unlock ${created.slice(0, 8)} to fail it)`,
            )
          process.exit(130)
        },
        (signal) => told?.info(pausing(signal)),
      )
    : () => undefined
  let handle: TaskHandle
  // Where the inbox ends before this run takes the task: a pause request after it (a `jobs cancel` while a fleet's agent starts) is this run's.
  const inboxAtStart = start.kind === 'new' ? 0 : (fileSize(join(start.ref.dir, FILES.inbox)) ?? 0)
  try {
    await holdForTest('run:before-take')
    if (start.kind === 'new') {
      handle = await createTask(
        env,
        { task_key: start.source.key, user: start.user, run: { ...runRecord(settings, config), ...delivering }, inherited_from: inheritance?.uuid ?? null },
        { onLost: lostNow, ...(start.uuid !== undefined ? { uuid: start.uuid } : {}) },
      )
    } else {
      handle = await resumeTask(env, start.ref, { onLost: lostNow, continueTimeout: start.ref.location === 'completed' }).catch((err: unknown) => {
        throw takenWhileResuming(err, start.ref)
      })
    }
  } catch (err) {
    removeSignals()
    throw err
  }
  created = handle.uuid
  run.onStarted?.(handle.uuid)
  await holdForTest('run:after-take')
  // Spans of this run (task, turns, LLM and tool calls): no-ops unless telemetry.otlp_endpoint is set.
  const taskTrace = await startTaskTrace(config, process.env, {
    uuid: handle.uuid,
    user: handle.metadata.user,
    host: hostname(),
    resumed: start.kind === 'resume',
  })
  const traced: { status: string; error: string | null } = { status: 'failed', error: null }
  const log = createRunLog({ uuid: handle.uuid, stream: run.stderr, format: run.logFormat, now: env.now })
  told = log
  // Stopped while the task was being created: said now that it has a log (the loop's first check pauses it).
  if (stop.reason === 'SIGINT' || stop.reason === 'SIGTERM') log.info(pausing(stop.reason))
  const cancelDeadline = stop.deadline(settings.timeoutMs === null ? null : settings.timeoutMs - (handle.state.elapsed_ms ?? 0))
  let mcp: { close(): Promise<void> } | null = null
  let unwatch = (): void => undefined
  try {
    const made = await createClient(config, env, handle, start.kind === 'resume')
    // Every request of the task checked first: cost caps, and a usage limit on its API key (docs/running.md#budgets).
    const guard =
      made instanceof ReplayClient
        ? null
        : spendGuard({ config, settings, index: env.index, now: env.now, fleetJob: run.fleetJob === true }, handle, made.model, log)
    const client = guard === null ? made : guard.wrap(made)
    const tools = ToolRegistry.builtin({ allowShell: settings.allowShell, finish: !settings.chat })
    // A task whose agent stopped after its finish call, before state.json took the answer.
    let finished: RecordedFinish | null = null
    if (start.kind === 'new') {
      begin(handle, settings, start, inheritance, config.context.inheritance.max_summary_tokens)
      await handle.setStatus('processing', 'started')
      log.info(
        `started ${handle.metadata.task_type}${handle.metadata.task_identifier ? ` ${handle.metadata.task_identifier}` : ''} in ${settings.workspace} (${client.model} at ${client.server}, dir ${handle.dir})`,
      )
      if (inheritance)
        log.info(
          `inherited the ${inheritance.summary_source === 'final_summary' ? 'final summary' : 'last summary'} of task ${inheritance.uuid} (${inheritance.status})`,
        )
    } else {
      const repaired = await repairResumed(handle, tools)
      finished = repaired.finished
      log.info(
        `resumed at turn ${handle.state.turns ?? 0} (${client.model} at ${client.server}, dir ${handle.dir})${repaired.answered ? `; ${repaired.answered} unanswered tool call(s) answered as aborted` : ''}${repaired.rebuilt ? '; current.jsonl rebuilt' : ''}${killedText(handle.stoppedCommands, 'the dead agent')}`,
      )
    }
    if (guard !== null) {
      const said = budgetLine(config, settings, handle.metadata.user ?? '', client.model, guard.spent)
      if (said !== null) log.info(said)
    }
    // Where to talk to the session from (issue 19): off a terminal nothing typed here is read.
    if (settings.chat)
      log.info(
        `chat session: talk to it with \`ctxagent chat ${handle.uuid.slice(0, 8)}\` (from any terminal), end it with \`ctxagent chat ${handle.uuid.slice(0, 8)} --end\``,
      )
    const remote = start.channel ? await openRemote(start, handle, config, log, stop.signal) : undefined
    if (remote) handle.onStop(() => remote.status(statusText(handle, 'paused; it continues when the task is resumed')))
    // Summaries (compaction, the final one) are LLM requests too: the task's stop ends them.
    const summaryClient = made instanceof ReplayClient ? made : stoppableClient(client, stop.signal)
    const agent = new Agent({
      handle,
      client,
      summarizer:
        made instanceof ReplayClient ? extractiveSummarizer() : llmSummarizer(summaryClient, { maxTokens: config.context.compression.summary_max_tokens }),
      tools,
      limits: {
        maxTurns: settings.maxTurns,
        maxTokens: settings.maxTokens,
        timeoutMs: settings.timeoutMs,
        compressAt: compressionLimit(config, client.contextLength),
        requestBudget: Math.floor(client.contextLength * 0.9),
        prune: {
          protectedTurns: config.context.prune.protected_turns,
          protectedToolRounds: config.context.prune.protected_tool_rounds,
          stepRounds: config.context.prune.step_rounds,
        },
        compaction: settingsFrom(config),
        commandTimeoutSeconds: settings.commandTimeoutSeconds,
        maxCallsPerReply: config.tools.max_calls_per_reply,
        maxRounds: config.context.compression.max_rounds,
        blobs: { thresholdBytes: config.context.blobs.threshold_bytes, maxInlineBytes: config.context.blobs.max_inline_bytes },
      },
      workspace: settings.workspace,
      hidden,
      sandbox,
      log,
      stop,
      now: env.now,
      ...(made instanceof ReplayClient ? { expected: (id: string) => made.expected(id) } : {}),
      ...(run.onTurn ? { onTurn: (turns: number) => run.onTurn?.(handle.dir, turns) } : {}),
      ...(remote ? { remote } : {}),
      trace: taskTrace,
      inboxAtStart,
    })
    // A pause request stops what is in flight (an LLM request, a tool, MCP start-up), not only the next turn.
    unwatch = agent.requests.watchForPause(() => stop.stop('pause'))
    // A task killed after it answered (during its final summary) only finishes its ending: no turn, no tools.
    const answered =
      start.kind === 'resume'
        ? (answeredEnding(handle) ?? (finished ? { kind: 'completed' as const, answer: finished.summary, finishStatus: finished.status } : null))
        : null
    if (answered) log.info('the task had already answered when its agent stopped; finishing its ending')
    else
      mcp = await startMcp(
        config,
        tools,
        log,
        stop.signal,
        mcpSandbox(config, settings.workspace, hidden, (record) => void handle.addNetwork(networkFields(record))),
      )
    const ending = answered
      ? answered
      : settings.chat
        ? await new ChatLoop(agent, handle, stop, log, {
            pollMs: config.chat.wait_interval_seconds * 1000,
            softTimeoutMs: config.chat.soft_timeout_minutes * 60_000,
          }).run()
        : await agent.run()
    unwatch()
    const deliverStep = (answer: string, finishStatus: 'done' | 'blocked' | null) => deliverCompleted(handle, config, log, answer, finishStatus)
    const outcome = await settle(
      handle,
      ending,
      agent.progress(),
      summaryClient,
      log,
      config.run.max_answer_chars,
      config.context.compression.summary_max_tokens,
      run.fleetJob === true,
      deliverStep,
    )
    Object.assign(traced, { status: outcome.status, error: outcome.error })
    if (remote && outcome.status !== 'lost') await remote.outcome(outcomeText(outcome))
    return { ...outcome, duration_ms: Date.now() - begun, inherited_from: handle.metadata.inherited_from ?? null }
  } catch (err) {
    traced.error = (err as Error).message
    // An error that is not an ending: record it (unless the task is no longer ours), then report it.
    await recordError(handle, err, env.layout.base, log)
    throw err
  } finally {
    // MCP servers live as long as this process works on the task: closed on every ending, started again by a resume.
    unwatch()
    await mcp?.close()
    cancelDeadline()
    removeSignals()
    await taskTrace.end(traced.status, traced.error)
    log.close()
  }
}

/**
 * Two processes resuming one paused task: the winner moves it to running/, and the
 * loser's link() or rename() then finds its directory gone (ENOENT) or taken
 * (EEXIST, ENOTEMPTY). That is a lost race, not a failure: one line, exit 4.
 */
function takenWhileResuming(err: unknown, ref: TaskRef): unknown {
  const code = (err as NodeJS.ErrnoException | null)?.code
  if (code !== 'ENOENT' && code !== 'EEXIST' && code !== 'ENOTEMPTY') return err
  return resumeRaceLost(ref.uuid)
}

async function openRemote(start: RunStart, handle: TaskHandle, config: Config, log: RunLog, stop: AbortSignal): Promise<RemoteLink> {
  const detection =
    start.kind === 'new'
      ? { last_comment_ids: start.seen ?? [], last_check_timestamp: new Date().toISOString(), status_comment_id: null }
      : handle.state.comment_detection
  const link = new RemoteLink(start.channel as Channel, handle.uuid, log, config.comments.min_interval_seconds * 1000, detection, stop)
  await link.status(statusText(handle, start.kind === 'new' ? 'started' : 'resumed'))
  // The status comment's id and the seen comments are state from now on.
  await handle.update({ comment_detection: link.detection() })
  return link
}

/** Starts the configured MCP servers and adds their tools; the SDK is loaded only when there are servers. */
async function startMcp(
  config: Config,
  tools: ToolRegistry,
  log: RunLog,
  signal: AbortSignal,
  sandbox: McpSandbox,
): Promise<{ close(): Promise<void> } | null> {
  if (!Object.values(config.mcp.servers).some((s) => s.enabled)) return null
  const { McpServers } = await import('../tools/mcp.js')
  // A stop during start-up ends it (servers closed); the loop then ends the task as the stop says.
  const started = await McpServers.start(config.mcp, (m) => log.warn(m), signal, sandbox)
  let added = 0
  for (const tool of started.tools) {
    if (tools.resolve(tool.name)?.name === tool.name) log.warn(`MCP: two tools are named ${tool.name}; the second is left out`)
    else {
      tools.add(tool)
      added++
    }
  }
  if (!signal.aborted) log.info(`MCP: ${added} tool(s) from ${Object.keys(started.servers.pids()).length} server(s)`, { mcp_pids: started.servers.pids() })
  return started.servers
}

async function createClient(config: Config, env: TaskEnv, handle: TaskHandle, resumed: boolean): Promise<LlmClient> {
  const llm = config.llm
  if (llm.provider === 'replay') {
    // A resumed replay continues after the assistant messages this task already played.
    return ReplayClient.open(llm.replay.from as string, env.layout, llm.replay.context_length, resumed ? (handle.state.turns ?? 0) : 0)
  }
  return requireLlmClient(config)
}

/**
 * The first messages of a new task: system prompt, task statement, inherited context.
 * A chat task starts with the hidden session marker in its inbox, and its first
 * message (if any) goes there too, to be answered like every other.
 */
function begin(
  handle: TaskHandle,
  settings: RunSettings,
  start: Extract<RunStart, { kind: 'new' }>,
  inheritance: Inheritance | null,
  inheritTokens: number,
): void {
  const base = settings.systemPromptFile
    ? readTextArg(settings.systemPromptFile, 'system prompt file')
    : defaultSystemPrompt(settings.workspace, settings.allowShell, settings.chat)
  handle.addMessage({ role: 'system', content: systemPrompt(base, settings.systemPromptAppend) })
  if (settings.chat) {
    appendInbox(handle.dir, { kind: 'message', sender: 'ctxagent', content: `[chat session started by ${start.user}]`, visible: false })
    if (start.source.text.trim() !== '') appendInbox(handle.dir, { kind: 'message', sender: start.user, content: start.source.text })
  } else {
    handle.addMessage({ role: 'user', content: start.source.text })
  }
  if (inheritance) handle.addMessage({ role: 'user', content: inheritanceMessage(inheritance, inheritTokens) })
}

/** The ending of a task whose state.json already holds its final answer (settle got that far before a kill), else null. */
function answeredEnding(handle: TaskHandle): Ending | null {
  const { final_answer: answer, finish_status: status, session } = handle.state
  if (typeof answer !== 'string') return null
  return { kind: 'completed', answer, finishStatus: status ?? null, ...(session ? { sessionEnded: true as const } : {}) }
}

function keyColumns(key: TaskKey, user: string) {
  const repository = key.owner && key.repo ? `${key.owner}/${key.repo}` : key.repo || key.owner || ''
  return { task_type: `${key.task_source}_${key.task_type}`, task_identifier: key.task_id || null, repository: repository || null, user }
}
