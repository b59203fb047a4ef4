"""The reliability workload's definition: every kind of command the executor settles.

A run: START → a service effect → wait for ``go`` → a 1 s timer → an approval (approve or
reject) → a second service effect → done. ``note`` signals are sent at any time: one that
arrives before the run waits for it is parked, applied when the run reaches ``wait-note``,
and any further ones are settled (rejected) when the run ends.
"""

DEFINITION_ID = "rel-order"

ORDER = """
definitionId: rel-order
definitionVersion: 1
contract:
  name: rel.v1
  signals:
    go: {type: object}
    note: {type: object}
stateSchema: {type: object}
startPayloadSchema:
  type: object
  properties: {n: {type: integer}}
  required: [n]
initialState: "{'n': payload.n, 'notes': 0, 'go': false}"
initialStep: reserve
steps:
  - id: reserve
    type: service
    target: rel.effect
    next: wait-go
  - id: wait-go
    type: wait-signal
    signal: go
    set: "{'go': true}"
    next: pause
  - id: pause
    type: timer
    after: PT1S
    next: wait-note
  - id: wait-note
    type: wait-signal
    signal: note
    set: "{'notes': state.notes + 1}"
    next: review
  - id: review
    type: human-task
    title: "Review order {{ state.n }}"
    assignment: {mode: group, value: approvers}
    decisions:
      - name: approve
        set: "{'approved': true}"
        next: ship
      - name: reject
        set: "{'approved': false}"
        next: done
  - id: ship
    type: service
    target: rel.effect
    next: done
  - id: done
    type: complete
"""
