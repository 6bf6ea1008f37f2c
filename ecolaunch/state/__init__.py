"""The state graph (pure data, :mod:`.graph`) and its file-locked store (:mod:`.store`)."""
