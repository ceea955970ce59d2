import type { CommandEnv } from '../command-env.js'
import { settledText } from '../actions/fleet-db.js'
import type { FleetReapOutcome } from '../actions/fleet-db.js'

/** The jobs a fleet pass settled, one line each (text output only: --json reports the pass). */
export function printSettled(ctx: CommandEnv, outcome: FleetReapOutcome): FleetReapOutcome['result'] {
  if (!ctx.json) for (const s of outcome.settled) ctx.io.out(settledText(s))
  return outcome.result
}
