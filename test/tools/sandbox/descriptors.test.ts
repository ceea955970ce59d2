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
      // Which of the shell's descriptors 0 to 5 are open, as /proc shows them; writing to 4 and 5 must fail too. Asked
      // with the shell's own test, not listed by ls: while a shell starts a pipeline it holds the pipe's read end itself
      // (as 3, seen by ls now and then), and one redirecting a command's output keeps its own stdout aside (as 10).
      {
        id: 'c',
        type: 'function',
        function: {
          name: 'run_command',
          arguments: JSON.stringify({
            command:
              'for fd in 0 1 2 3 4 5; do [ -e /proc/$$/fd/$fd ] && printf "%s " $fd; done; echo; (echo forged >&4) 2>/dev/null && echo WROTE4; (echo go >&5) 2>/dev/null && echo WROTE5; true',
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
