from approvals.models.policy import PolicyVersion
from approvals.models.request import ApprovalGrant, ApprovalRequest

__all__ = ["ApprovalGrant", "ApprovalRequest", "PolicyVersion"]
