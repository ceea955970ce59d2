import type { Config } from '../config/schema.js'
import type { Channel } from '../sources/types.js'
import type { TaskRef } from '../storage/fs/layout.js'
import type { TaskEnv } from '../storage/task/env.js'
import type { TaskKey } from '../storage/task/metadata.js'
import type { RunSettings } from './settings.js'

// What a run is given: the task it starts or resumes, and the surroundings it runs in.

/** Where a new task comes from: its key and its first user message (docs/contract.md §12.1, §13.1). */
export interface TaskSource {
  key: TaskKey
  /** The task statement, the first user message. */
  text: string
  /** A pull request's task: the task that opened it, inherited from when no earlier task has its key (docs/delivery.md#the-review-loop). */
  opener?: string
}

/** A new task (from text, or from an issue with its channel), or a resumed one (its channel found again from its key). */
export type RunStart =
  | { kind: 'new'; source: TaskSource; user: string; channel?: Channel; seen?: string[] /** Chosen beforehand (a fleet job names its task). */; uuid?: string }
  | { kind: 'resume'; ref: TaskRef; channel?: Channel }

export interface RunEnv {
  env: TaskEnv
  config: Config
  settings: RunSettings
  stderr: NodeJS.WriteStream
  logFormat: 'text' | 'json'
  /** Stop on SIGINT/SIGTERM (the CLI); the demo drives stops itself. */
  signals: boolean
  /** The config file in force, hidden from every tool and command (null: none). */
  configFile?: string | null
  /** Called after each turn with the task's directory and turn count (the demo pauses half-way). */
  onTurn?: (dir: string, turns: number) => void
  /** Called once the task exists and is this process's (the audit line of a run is written then, not at exit). */
  onStarted?: (uuid: string) => void
  /** Run by a fleet's worker: a pause by a signal or a passing LLM failure is resumed by the fleet, not by hand. */
  fleetJob?: boolean
}
