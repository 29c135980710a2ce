//! HugetlbMax: `hugetlb.<size>.max` (and `.rsvd.max`) on v2, `.limit_in_bytes` on v1, for every
//! page size the host has.

use super::{v, Cmp, Mapper};
use crate::layout::Version;
use bulkhead_sys::host::page_size_cgroup_name;
use bulkhead_sys::units::Limit;

impl Mapper<'_> {
    pub(super) fn hugetlb(&mut self, version: Version) {
        // Every page size the host has: those the plan leaves out go back to no limit.
        let mut sizes: Vec<(u64, Limit, bool)> = self
            .page_sizes
            .iter()
            .filter(|p| !self.slice.hugetlb_max.contains_key(p))
            .map(|p| (*p, Limit::Infinity, true))
            .collect();
        sizes.extend(self.slice.hugetlb_max.iter().map(|(p, l)| (*p, *l, false)));
        for (size, limit, default) in &sizes {
            let (size, limit) = (size, limit);
            let name = page_size_cgroup_name(*size);
            let why = if *default {
                format!("HugetlbMax[{name}] (default)")
            } else {
                format!("HugetlbMax[{name}]={}", limit.v2())
            };
            match version {
                Version::V2 => {
                    self.wants.push(v(
                        &format!("hugetlb.{name}.max"),
                        limit.v2(),
                        why.clone(),
                        Cmp::Number,
                        *default,
                    ));
                    if self.caps.hugetlb_rsvd {
                        self.wants.push(v(
                            &format!("hugetlb.{name}.rsvd.max"),
                            limit.v2(),
                            why,
                            Cmp::Number,
                            true,
                        ));
                    }
                }
                Version::V1 => {
                    self.wants.push(v(
                        &format!("hugetlb.{name}.limit_in_bytes"),
                        limit.v1(),
                        why.clone(),
                        Cmp::Number,
                        *default,
                    ));
                    if self.caps.hugetlb_rsvd {
                        self.wants.push(v(
                            &format!("hugetlb.{name}.rsvd.limit_in_bytes"),
                            limit.v1(),
                            why,
                            Cmp::Number,
                            true,
                        ));
                    }
                }
            }
        }
    }
}
