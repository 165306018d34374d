/**
 * Races across agent lifetimes: the second half of the programs, in a file of its own
 * so that vitest can run it on another worker. What the programs do and which invariants hold is
 * described in RacePropertyFirstHalf.test.ts.
 */
import { raceSuite } from "./raceHarness.js"

raceSuite(2)
