"""Where WaitPolicy and Cancel were documented before they moved below tools/
(corral/calls/waiting.py): the old import keeps working."""

from corral.calls.waiting import PLAIN as PLAIN
from corral.calls.waiting import Cancel as Cancel
from corral.calls.waiting import WaitPolicy as WaitPolicy
