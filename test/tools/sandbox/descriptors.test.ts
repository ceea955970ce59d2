import { describe, expect, it } from 'vitest'
import { planSandbox } from '../../../src/tools/sandbox.js'
import { setup } from '../fixture.js'

/*
 * What a sandboxed command holds of ctxagent's besides its stdio (docs/security.md#what-a-command-cannot-do):
 * nothing. bwrap's seccomp filter (3) and --info-fd (4) are closed before it starts, and the
 * gate's socket (5), whose other end is ctxagent's, is closed by the gate: a command that
 * could write to 4 or 5 would speak to ctxagent in bwrap's or the gate's name.
 */

describe('a sandboxed command', () => {
  it("holds none of bwrap's or the gate's descriptors (3, 4, 5)", async () => {
    const s = setup()
    const plan = planSandbox({ sandbox: 'bwrap', network: false, sandbox_read_only: [] }, [s.tree], s.ws)
    if (!plan.ok) throw new Error(plan.why)
    const out = await s.tools.call(
      // The shell's own descriptors, as /proc shows them; writing to 4 and 5 must fail too.
      {
        id: 'c',
        type: 'function',
        function: {
          name: 'run_command',
          arguments: JSON.stringify({
            command: 'ls /proc/$$/fd | tr "\\n" " "; echo; (echo forged >&4) 2>/dev/null && echo WROTE4; (echo go >&5) 2>/dev/null && echo WROTE5; true',
          }),
        },
      },
      { ...s.ctx, sandbox: plan.plan },
    )
    expect(out.output).toMatch(/^exit code 0\n/)
    const fds = (out.output.split('\n')[1] ?? '').trim().split(' ')
    expect(fds.slice(0, 3)).toEqual(['0', '1', '2'])
    // Whatever ctxagent itself inherited without close-on-exec from its own launcher is not its to close (the report says so); its own are.
    expect(fds.filter((fd) => ['3', '4', '5'].includes(fd))).toEqual([])
    expect(out.output).not.toMatch(/WROTE/)
  })
})
