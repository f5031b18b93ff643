package engine

// MemoUseInterval exports memoUseInterval to the external tests.
const MemoUseInterval = memoUseInterval
