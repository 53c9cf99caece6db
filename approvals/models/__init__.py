from approvals.models.policy import PolicyVersion

__all__ = ["PolicyVersion"]
