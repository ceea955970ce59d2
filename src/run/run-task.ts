import { randomUUID } from 'node:crypto'
import { hostname } from 'node:os'
import { startTaskTrace } from '../telemetry/trace.js'
import { ReplayClient } from '../llm/replay.js'
import type { TaskHandle } from '../storage/task/handle.js'
import { ToolRegistry } from '../tools/registry.js'
import { networkFields } from '../tools/sandbox/egress-proxy.js'
import { holdForTest, stallForTest } from '../test-pause.js'
import { agentLimits, summarizerFor } from './agent-setup.js'
import { ChatLoop } from './chat.js'
import { deliveryStart } from './delivery-step.js'
import { environmentOf } from '../storage/task/environment-view.js'
import { environmentStep, resumedEnvironment, testStep } from './environment-step.js'
import { instructionsStep } from './instructions-step.js'
import { issueStatus, labelIssue, movesLabels } from './issue-labels.js'
import { createRunLog } from './log.js'
import { outcomeText } from './outcome.js'
import type { Outcome } from './outcome.js'
import { postSetupFailure, statusText } from './remote.js'
import type { RecordedFinish } from './repair.js'
import type { RunEnv, RunStart } from './run-start.js'
import { hiddenPaths, mcpSandbox, shellSandbox } from './sandbox-setup.js'
import { StalledError, watchDrain } from './drain-guard.js'
import { pauseStalled, recordError, settle } from './settle.js'
import { budgetLine } from './spend-setup.js'
import { StopController, stoppableClient } from './stop.js'
import { pauseOnSignals, pausingText } from './stop-signals.js'
import type { SignalListeners } from './stop-signals.js'
import { keepCompiledCode } from '../compile-cache.js'
import { answeredEnding, beginNew, beginResumed } from './task-begin.js'
import { openRemote, startMcp, taskClient } from './task-start.js'
import { inboxEnd, inheritanceFor, takeTask } from './task-take.js'
import { Agent } from './turn.js'
import { removeTaskTree } from '../workspace/task-tree.js'
import { trustedBase } from '../workspace/trusted-base.js'
import { ENVIRONMENT_FILE } from '../workspace/environment/definition.js'
import { INSTRUCTION_FILES } from '../workspace/instructions.js'

/**
 * Runs one task to an ending: creates it (or resumes it), runs the agent loop, and
 * settles it (completed, timeout, failed, paused), or writes nothing more when its
 * lock was taken over. Returns the outcome; throws only for errors before the task exists.
 */
export async function runTask(run: RunEnv, start: RunStart): Promise<Outcome> {
  const { env, config, settings } = run
  // Before the task exists: a shell without a working sandbox is refused unless the operator opted out.
  const hidden = hiddenPaths(env.layout.base, run.configFile ?? null)
  // Inherited by the workspace the task was started in, before a delivering task moves to a tree of its own.
  const inheritance = await inheritanceFor(env, settings, start)
  const taking: RunStart = start.kind === 'new' ? { ...start, uuid: start.uuid ?? randomUUID() } : start
  // What delivery starts from, read (and a workspace it cannot work with refused) before the task exists; a
  // delivering task works on a tree of its own from here (docs/delivery.md#what-a-task-starts-from).
  const delivering = taking.kind === 'new' ? await deliveryStart(settings, config, taking.uuid as string) : { record: {}, made: undefined }
  // A new task's trusted base (docs/environments.md#where-it-is-read-from) depends on its workspace alone: read while
  // the task is taken (its directory, its index row), not after (git's calls cost a fleet job's start most of its
  // time on a loaded host: docs/fleet.md#dispatch-latency). The files read from it below are listed with it.
  const baseAhead = taking.kind === 'new' ? trustedBase(settings.workspace, [ENVIRONMENT_FILE, ...INSTRUCTION_FILES]) : null
  let sandbox: ReturnType<typeof shellSandbox>
  try {
    sandbox = shellSandbox(config, settings.allowShell, hidden, settings.workspace)
  } catch (err) {
    removeTaskTree(delivering.made)
    throw err
  }
  const stop = new StopController()
  const begun = Date.now()
  // The handlers are in place before the task's directory is: a stop while it is created (or
  // taken from paused/) pauses it once it exists, instead of killing the process with a
  // half-made task in running/ (a worker stopped just as its agent began a job).
  const heard: SignalListeners = { log: null, uuid: null }
  const removeSignals = run.signals ? pauseOnSignals(stop, heard) : () => undefined
  const inboxAtStart = inboxEnd(start)
  let handle: TaskHandle
  try {
    await holdForTest('run:before-take')
    handle = await takeTask(env, taking, { config, settings, delivering: delivering.record, inheritance, onLost: () => stop.stop('lost') })
  } catch (err) {
    removeSignals()
    removeTaskTree(delivering.made)
    throw err
  }
  heard.uuid = handle.uuid
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
  heard.log = log
  // Stopped while the task was being created: said now that it has a log (the loop's first check pauses it).
  if (stop.reason === 'SIGINT' || stop.reason === 'SIGTERM') log.info(pausingText(stop.reason))
  const cancelDeadline = stop.deadline(settings.timeoutMs === null ? null : settings.timeoutMs - (handle.state.elapsed_ms ?? 0))
  // Set inside work(): what the finally below closes.
  const open: { mcp: { close(): Promise<void> } | null } = { mcp: null }
  let unwatch = (): void => undefined
  const drain = watchDrain(handle.uuid)
  const work = async (): Promise<Outcome> => {
    await stallForTest('run:work')
    // A new task's trusted base (docs/environments.md#where-it-is-read-from), read once for its environment and its instructions;
    // a resumed task's again when a stop came during its setup (docs/environments.md#a-stop-during-setup).
    const preparing = start.kind === 'new' || environmentOf(handle.state)?.status === 'stopped'
    const base = baseAhead !== null ? await baseAhead : preparing ? await trustedBase(settings.workspace, [ENVIRONMENT_FILE, ...INSTRUCTION_FILES]) : null
    // Its environment (docs/environments.md), before any LLM request: a failed setup ends it here.
    const prepared =
      base !== null ? await environmentStep(run, handle, hidden, log, begun, stop.signal, base) : await resumedEnvironment(run, handle, hidden, log, begun)
    if (prepared.kind === 'failed') {
      Object.assign(traced, { status: 'setup_failed', error: prepared.outcome.error })
      // The issue is told in one comment per base, before any link to it is opened (docs/environments.md#when-setup-fails).
      if (start.channel) await postSetupFailure(start.channel, log, prepared.failure, base?.kind === 'commit' ? base.commit : (base?.kind ?? 'none'))
      return prepared.outcome
    }
    // An image's system is what the agent's commands see too (docs/environments.md#an-image).
    if (prepared.kind === 'ready' && prepared.root !== null && sandbox.kind === 'bwrap') sandbox = { ...sandbox, root: prepared.root }
    const { made, guard, client } = await taskClient(run, handle, start.kind === 'resume', log)
    const tools = ToolRegistry.builtin({ allowShell: settings.allowShell, finish: !settings.chat })
    // A task whose agent stopped after its finish call, before state.json took the answer.
    let finished: RecordedFinish | null = null
    const note = prepared.kind === 'ready' ? prepared.note : null
    if (start.kind === 'new' && base !== null)
      await beginNew(handle, run, start, inheritance, client, log, { environment: note, instructions: await instructionsStep(run, handle, log, base) })
    else {
      finished = await beginResumed(handle, tools, client, log)
      if (note !== null) handle.addMessage({ role: 'user', content: note })
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
    // By hand, an issue delivered as a PR carries poll's status labels, so that a poller does not queue it again.
    const labelling = remote !== undefined && movesLabels(settings, handle.metadata.task_key, run.fleetJob === true)
    if (labelling) await labelIssue(config, handle.metadata.task_key, 'processing', log)
    if (remote) handle.onStop(() => remote.status(statusText(handle, 'paused; it continues when the task is resumed')))
    // Summaries (compaction, the final one) are LLM requests too: the task's stop ends them.
    const summaryClient = made instanceof ReplayClient ? made : stoppableClient(client, stop.signal)
    const agent = new Agent({
      handle,
      client,
      summarizer: summarizerFor(made, summaryClient, config),
      tools,
      limits: agentLimits(config, settings, client),
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
    // What the task loaded to get here, kept compiled for the next command now (Node 22.10+), not at this one's exit.
    keepCompiledCode()
    // A pause request stops what is in flight (an LLM request, a tool, MCP start-up), not only the next turn.
    unwatch = agent.requests.watchForPause(() => stop.stop('pause'))
    const answered = start.kind === 'resume' ? answeredEnding(handle, finished) : null
    if (answered) log.info('the task had already answered when its agent stopped; finishing its ending')
    else
      open.mcp = await startMcp(
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
    // A stop from here on does not pause a completed task: its ending (delivery, final summary) goes on, and the signal's line says so.
    if (ending.kind === 'completed') heard.answered = true
    // The repository's test command, run by ctxagent itself once the agent finished (docs/environments.md#the-test-command).
    if (ending.kind === 'completed') await testStep(run, handle, hidden, log, stop.signal)
    const outcome = await settle({ handle, ending, progress: agent.progress(), summaryClient, log, config, layout: env.layout, inFleet: run.fleetJob === true })
    Object.assign(traced, { status: outcome.status, error: outcome.error })
    if (remote && outcome.status !== 'lost') await remote.outcome(outcomeText(outcome))
    const labelled = labelling ? issueStatus(outcome) : null
    if (labelled !== null) await labelIssue(config, handle.metadata.task_key, labelled, log)
    return { ...outcome, duration_ms: Date.now() - begun, inherited_from: handle.metadata.inherited_from ?? null }
  }
  try {
    return await Promise.race([work(), drain.stalled])
  } catch (err) {
    traced.error = (err as Error).message
    // An error that is not an ending: record it (unless the task is no longer ours), then report it.
    if (err instanceof StalledError) await pauseStalled(handle, err, log)
    else await recordError(handle, err, env.layout.base, log)
    throw err
  } finally {
    drain.dispose()
    // MCP servers live as long as this process works on the task: closed on every ending, started again by a resume.
    unwatch()
    await open.mcp?.close()
    cancelDeadline()
    removeSignals()
    await taskTrace.end(traced.status, traced.error)
    log.close()
  }
}
