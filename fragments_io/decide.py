"""The commit decision for a whole table of rows at once: gazette.message.decide, re-exported.

The vectorised decision lives in the message layer (one implementation, shared with the consumer's
columnar path); the data source imports it from here as before.
"""

from gazette.message.decide import Decider, History, replay_deliveries, seg_cummax

__all__ = ["Decider", "History", "replay_deliveries", "seg_cummax"]
