package engine

// coveredByLog lowers what checkAfter judges the tables the MANIFEST does
// not record by, when the log holds every write Badger may lack: the store
// keeps a log (the mark says so) and Badger holds the latest checkpoint,
// after which every write went to the log before Badger (the open replays
// it next). A power cut can catch a memtable flush between the sync of its
// table and the MANIFEST's: the memtable log the table came from was not
// synced since the checkpoint, so Badger comes back without the table's
// newer writes, and a check by versions alone would take that for a
// truncated MANIFEST (TestPowerLoss found it: the store refused to open).
// Those writes came after the checkpoint, so the log has them.
func (e *Engine) coveredByLog(m *mark, pf preflight) preflight {
	if m != nil && m.Log && e.checkMark(m) == nil {
		pf.maxQuarantined = min(pf.maxQuarantined, e.db.MaxVersion())
	}
	return pf
}
