// Which rows BENCHMARKS.md keeps after a run (bench/run.mjs; test/bench/merge.test.ts).

/**
 * The rows of the new file, in the suites' order. Rows of suites not run are kept. A suite
 * run whole replaces all its rows, so a row it no longer writes goes. A suite run in part
 * (`inPlace(suite)`: BENCH_ROWS, or the suite's module saying it ran some of its parts)
 * keeps every row it did not write, and each row it wrote replaces its old self in place.
 */
export function mergeRows({ previous, results, suites, order, inPlace }) {
  const key = (r) => `${r.suite}/${r.name}`
  return [
    ...previous.filter((p) => !suites.includes(p.suite) || inPlace(p.suite)).map((p) => results.find((r) => key(r) === key(p)) ?? p),
    ...results.filter((r) => !(inPlace(r.suite) && previous.some((p) => key(p) === key(r)))),
  ].sort((a, b) => order.indexOf(a.suite) - order.indexOf(b.suite))
}
