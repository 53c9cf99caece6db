from approvals.models.policy import PolicyVersion
from approvals.models.request import ApprovalRequest

__all__ = ["ApprovalRequest", "PolicyVersion"]
