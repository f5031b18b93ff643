package pack

// RaceEnabled is raceEnabled for the external tests (package pack_test).
const RaceEnabled = raceEnabled
